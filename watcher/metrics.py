"""Prometheus metrics of one watcher."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Info


class WatcherMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.seen = Counter("kyma_watcher_events_seen", "Changes observed", ["module"], registry=registry)
        self.sent = Counter(
            "kyma_watcher_events_sent", "Events accepted by the listener", ["module"], registry=registry
        )
        self.noise = Counter("kyma_watcher_events_noise", "Changes dropped as noise", ["reason"], registry=registry)
        self.rejected = Counter(
            "kyma_watcher_events_rejected", "Events the listener refused as invalid", ["status"], registry=registry
        )
        self.retries = Counter("kyma_watcher_delivery_retries", "Delivery attempts retried", registry=registry)
        self.resent = Counter(
            "kyma_watcher_delivery_resent",
            "Requests sent again at once because the listener closed their kept-alive connection under them (often:"
            " delivery.keepalive_seconds not below the listener's)",
            registry=registry,
        )
        self.oversize = Counter(
            "kyma_watcher_events_reference_only", "Objects too large, sent as references", registry=registry
        )
        self.relists = Counter(
            "kyma_watcher_relists",
            "Full lists of a watched resource (start, leader change, 410 Gone)",
            registry=registry,
        )
        self.queue_depth = Gauge("kyma_watcher_queue_depth", "Objects pending or in flight", registry=registry)
        self.leader = Gauge("kyma_watcher_leader", "1 while this pod is the active sender", registry=registry)
        self.watch_set = Info(
            "kyma_watcher_watch_set", "The revision of KCP's watch set this watcher follows", registry=registry
        )
