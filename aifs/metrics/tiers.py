"""Tier metrics: hits, misses and bytes read from the TierManager's counters, read at scrape
time; read latency per tier from `observe_tier_read`, which the TierManager calls."""

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from aifs.metrics.registry import LATENCY_BUCKETS, REGISTRY

TIER_READ = Histogram("aifs_tier_read_seconds", "Time to read one block from a tier", ["tier"],
                      buckets=LATENCY_BUCKETS, registry=REGISTRY)


def observe_tier_read(tier: str, seconds: float) -> None:
    TIER_READ.labels(tier).observe(seconds)


class VolumeCollector:
    """Figures a volume already keeps, turned into metric families when Prometheus scrapes."""

    def __init__(self, volume) -> None:
        self.vol = volume

    def collect(self):
        """Read on the scrape thread while the mount runs: a table changing under the read is
        retried rather than failing the scrape."""
        for attempt in range(3):
            try:
                return list(self._families())
            except RuntimeError:  # "dictionary changed size during iteration"
                if attempt == 2:
                    raise
        return []

    def _families(self):
        tiers = self.vol.tiers
        order = [tier.name for tier in tiers.tiers]
        hits = CounterMetricFamily("aifs_tier_hits", "Block reads served by a tier", labels=["tier"])
        misses = CounterMetricFamily(
            "aifs_tier_misses", "Block reads a tier could not serve (served by a tier below it)", labels=["tier"])
        read = CounterMetricFamily("aifs_tier_read_bytes", "Bytes read from a tier", labels=["tier"])
        used = GaugeMetricFamily("aifs_tier_used_bytes", "Bytes held by a tier", labels=["tier"])
        capacity = GaugeMetricFamily("aifs_tier_capacity_bytes", "Byte budget of a tier", labels=["tier"])
        for i, tier in enumerate(tiers.tiers):
            stats = tiers.stats[tier.name]
            hits.add_metric([tier.name], stats.hits)
            misses.add_metric([tier.name], sum(tiers.stats[below].hits for below in order[i + 1:]))
            read.add_metric([tier.name], stats.bytes_read)
            used.add_metric([tier.name], tier.used())
            capacity.add_metric([tier.name], tier.capacity)
        yield from (hits, misses, read, used, capacity)
        yield from self._uploads()
        yield from self._placement()
        yield from self._health()

    def _uploads(self):
        uploader = self.vol.uploader
        pending = uploader.pending
        yield GaugeMetricFamily("aifs_upload_backlog_blocks", "Blocks not yet in the durable tier",
                                value=len(pending))
        yield GaugeMetricFamily("aifs_upload_backlog_bytes", "Bytes not yet in the durable tier",
                                value=self.vol.tiers.pending_bytes(pending))
        yield CounterMetricFamily("aifs_uploaded_bytes", "Bytes uploaded to the durable tier",
                                  value=uploader.uploaded_bytes)
        yield CounterMetricFamily("aifs_uploaded_packs", "Packs of small blocks uploaded to the durable tier",
                                  value=uploader.uploaded_packs)
        yield GaugeMetricFamily("aifs_dirty_bytes", "Dirty bytes staged on NVMe",
                                value=self.vol.tiers.dirty_bytes())

    def _health(self):
        """Up (1) or down (0) by the circuit breakers: the durable tier, and each flash server
        and peer; the figures `aifs status` shows, for alerts."""
        tiers = self.vol.tiers
        durable = tiers.durable_breaker_health()
        yield GaugeMetricFamily("aifs_durable_up", "Whether the durable tier's circuit breaker lets requests through",
                                value=1 if durable is None or durable["up"] else 0)
        servers = GaugeMetricFamily("aifs_server_up", "Whether a flash server or peer is up by its circuit breaker",
                                    labels=["tier", "server"])
        for tier in tiers.tiers:
            for server in tiers.server_health(tier.name) or ():
                servers.add_metric([tier.name, server["server"]], 1 if server["up"] else 0)
        yield servers

    def _placement(self):
        pinned = GaugeMetricFamily("aifs_pinned_bytes", "Bytes of pinned blocks held by a tier", labels=["tier"])
        for tier, figures in self.vol.pinner.status().items():
            pinned.add_metric([tier], figures["resident"])
        yield pinned
        ahead = self.vol.prefetch.status()
        yield CounterMetricFamily("aifs_readahead_blocks", "Blocks fetched ahead of readers", value=ahead["blocks"])
        yield CounterMetricFamily("aifs_readahead_deferred", "Readahead put off: too many in flight",
                                  value=ahead["deferred"])
        yield CounterMetricFamily("aifs_warmed_files", "Files fetched whole for readers reading them broadly",
                                  value=ahead["warmed_files"])
        yield GaugeMetricFamily("aifs_warming_files", "Files being fetched whole now", value=ahead["warming_files"])
        yield CounterMetricFamily("aifs_page_cache_blocks", "Blocks of warmed files handed to the kernel's page cache",
                                  value=ahead["page_cache_blocks"])
        yield from self._sample_order()

    def _sample_order(self):
        """Sample-order prefetch: blocks by what became of them, hinted files read by whether their
        fetch got there first."""
        counts = self.vol.sample_order.figures()
        blocks = CounterMetricFamily("aifs_order_prefetch_blocks", "Blocks fetched ahead of readers that hinted "
                                     "their order, by what became of them", labels=["outcome"])
        nbytes = CounterMetricFamily("aifs_order_prefetch_bytes", "Bytes of those blocks", labels=["outcome"])
        for outcome in ("fetched", "used", "cancelled", "wasted"):
            blocks.add_metric([outcome], counts[f"blocks_{outcome}"])
            nbytes.add_metric([outcome], counts[f"bytes_{outcome}"])
        files = CounterMetricFamily("aifs_order_prefetch_reads", "Reads of hinted files: ready (fetched first), "
                                    "late (joined the fetch) or missed", labels=["outcome"])
        for outcome in ("ready", "late", "missed"):
            files.add_metric([outcome], counts[f"files_{outcome}"])
        yield from (blocks, nbytes, files)
