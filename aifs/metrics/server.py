"""The HTTP endpoint Prometheus scrapes, started by the mount when `[metrics] listen` is set."""

import logging
from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from aifs.config.models import MetricsConfig
from aifs.metrics.registry import REGISTRY
from aifs.metrics.tiers import VolumeCollector

log = logging.getLogger(__name__)


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: Thread
    collector: VolumeCollector

    @property
    def port(self) -> int:
        return self.server.server_port

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        REGISTRY.unregister(self.collector)


def serve_metrics(config: MetricsConfig, volume) -> MetricsServer | None:
    """Serve the volume's metrics in a thread (scrapes never touch the event loop's tasks);
    None when metrics are off. Port 0 picks a free port (tests)."""
    if config.listen is None:
        return None
    host, _, port = config.listen.rpartition(":")
    collector = VolumeCollector(volume)
    REGISTRY.register(collector)
    server, thread = start_http_server(int(port), addr=host.strip("[]"), registry=REGISTRY)
    log.info("metrics on http://%s/metrics", config.listen)
    return MetricsServer(server, thread, collector)
