"""The KCP endpoint that turns watcher events into JetStream messages.

A request is accepted only when its client certificate belongs to the runtime the event names,
the event is valid, and JetStream has acknowledged it; anything else gets a 4xx that says why
(the watcher drops it) or a 503 (the watcher retries). Nothing invalid reaches NATS.
"""
