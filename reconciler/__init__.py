"""Reconcilers: level-based controllers that keep KCP and runtimes in sync, both directions.

Every trigger — a KCP watch event, a watcher event from NATS, a kubeconfig change, the periodic
resync — only names a key; the reconcile for that key re-reads desired and actual state and
applies idempotently with server-side apply under one field manager.
"""
