"""The event bus's security: NATS identities, least-privilege permissions, server configuration, streams.

Every component connects to NATS over TLS with an nkey identity of its own; the server refuses
anonymous clients. What each identity may do is decided here, once (``permissions``), and
rendered into the server's configuration (``server_config``): the listener may only publish
events; a reconciler may only use its own durable consumers; a central team may only create and
read a durable filtered to its module; only the admin may create or delete streams. The
``kyma-eventbus`` command sets it up, adds teams and creates the streams.
"""
