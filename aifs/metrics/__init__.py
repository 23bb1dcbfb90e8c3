"""Prometheus metrics of a mount: FUSE operations, tiers, uploads; served on a loopback port."""

from aifs.metrics.fuse import instrument_operations
from aifs.metrics.registry import REGISTRY
from aifs.metrics.server import MetricsServer, MetricsUnavailable, serve_metrics
from aifs.metrics.tiers import observe_tier_read

__all__ = ["REGISTRY", "MetricsServer", "MetricsUnavailable", "instrument_operations", "observe_tier_read", "serve_metrics"]
