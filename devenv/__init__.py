"""A real local landscape for tests and the demo: NATS JetStream, a KCP and SKR apiservers.

Everything listens on loopback and runs as child processes of the caller; nothing is faked.
"""
