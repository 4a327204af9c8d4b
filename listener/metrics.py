"""Prometheus metrics of one listener."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ListenerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.connections = Gauge(
            "kyma_listener_connections",
            "Open event connections (idle ones close after keepalive_seconds: this follows activity, not the fleet)",
            registry=registry,
        )
        self.requests = Counter(
            "kyma_listener_requests",
            "Event requests by outcome",
            ["outcome"],
            registry=registry,
        )
        self.published = Counter(
            "kyma_listener_published_events",
            "Events acknowledged by JetStream, by module",
            ["module", "duplicate"],
            registry=registry,
        )
        self.publish_seconds = Histogram(
            "kyma_listener_publish_seconds",
            "Time from publish to JetStream ack",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=registry,
        )
        self.in_flight = Gauge("kyma_listener_in_flight_requests", "Requests being handled", registry=registry)
        self.heartbeats = Counter(
            "kyma_listener_heartbeats", "Watcher heartbeat requests by outcome", ["outcome"], registry=registry
        )
        self.heartbeat = Gauge(
            "kyma_listener_runtime_heartbeat_timestamp_seconds",
            "When the runtime's active watcher last said it is alive (max over listener replicas)",
            ["runtime"],
            registry=registry,
        )
        self.watcher_queue_depth = Gauge(
            "kyma_listener_runtime_watcher_queue_depth",
            "Objects waiting in the runtime's watcher for delivery, as its last heartbeat said (a watcher falling behind)",
            ["runtime"],
            registry=registry,
        )
