"""The registry each component serves on /metrics."""

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector


def component_registry() -> CollectorRegistry:
    """A registry with the process metrics every component exports (CPU, memory, open files).

    Each component keeps a registry of its own (tests run several in one process); the process
    and platform collectors make ``process_cpu_seconds_total``, ``process_resident_memory_bytes``
    and ``python_info`` part of it, as on the default registry.
    """
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
