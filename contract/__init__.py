"""The event contract shared by watcher, listener and reconcilers.

Nothing here does I/O: it defines what a change event is (`events`), how it is named on the
bus (`subjects`) and the identifiers both are built from (`ids`). Every component imports this
package; it imports none of them.
"""
