"""The one registry the mount exports: aifs metrics only, not the client library's process defaults."""

from prometheus_client import CollectorRegistry

REGISTRY = CollectorRegistry(auto_describe=True)

# Latency buckets from 50 µs (a RAM hit) to 10 s (an S3 read under retries).
LATENCY_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
