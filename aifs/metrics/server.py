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
    collector: VolumeCollector | None = None

    @property
    def port(self) -> int:
        return self.server.server_port

    def watch(self, volume) -> None:
        """Serve the volume's tier and upload figures beside the process-wide ones."""
        self.collector = VolumeCollector(volume)
        REGISTRY.register(self.collector)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.collector is not None:
            REGISTRY.unregister(self.collector)


class MetricsUnavailable(Exception):
    """The metrics address cannot be served; the message names it."""


def serve_metrics(config: MetricsConfig) -> MetricsServer | None:
    """Serve metrics in a thread (scrapes never touch the event loop's tasks); None when metrics
    are off. Port 0 picks a free port (tests). Called before the volume opens, so an address
    that cannot be bound stops the mount before it starts."""
    if config.listen is None:
        return None
    host, _, port = config.listen.rpartition(":")
    try:
        server, thread = start_http_server(int(port), addr=host.strip("[]"), registry=REGISTRY)
    except OSError as e:
        raise MetricsUnavailable(f"cannot serve metrics on {config.listen}: {e.strerror or e}; "
                                 "free the address or change [metrics] listen") from None
    log.info("metrics on http://%s/metrics", config.listen)
    return MetricsServer(server, thread)
