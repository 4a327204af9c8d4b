"""Thin clients: the only modules that import kubernetes_asyncio and nats.

Engines (watcher, listener, reconciler) talk to the outside through these, which translate
third-party errors into our own at the edge.
"""
