"""Choosing the transport: verbs when pyverbs imports and a device is present, TCP otherwise.

Clients and servers decide the same way, and say what they chose and why in the log.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aifs.rdma.auth import Secret
from aifs.rdma.device import Probe, probe_verbs
from aifs.rdma.tcp import DEFAULT_TIMEOUT, TcpTransport
from aifs.rdma.transport import Transport, TransportUnavailable
from aifs.rdma.verbs_transport import VerbsTransport

log = logging.getLogger(__name__)

KINDS = ("auto", "tcp", "verbs")


@dataclass(frozen=True, slots=True)
class Choice:
    kind: str            # "tcp" or "verbs"
    device: str | None   # the RDMA device when kind is "verbs"
    reason: str


def choose(kind: str = "auto", device: str | None = None,
           probe: Callable[[str | None], Probe] | None = None) -> Choice:
    """Raises ValueError for an unknown kind, TransportUnavailable for "verbs" where it cannot run."""
    if kind not in KINDS:
        raise ValueError(f"transport {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "tcp":
        choice = Choice("tcp", None, "configured")
    else:
        found = (probe or probe_verbs)(device)
        if found.device is None and kind == "verbs":
            raise TransportUnavailable(f"transport 'verbs' cannot run here: {found.reason}")
        choice = Choice("verbs" if found.device else "tcp", found.device, found.reason)
    log.info("transport %s: using %s (%s)", kind, choice.kind, choice.reason)
    return choice


def select_transport(kind: str = "auto", device: str | None = None, streams: int = 2,
                     timeout: float = DEFAULT_TIMEOUT,
                     probe: Callable[[str | None], Probe] | None = None, *, secret: Secret) -> Transport:
    """The transport `kind` stands for here; its connections authenticate with `secret`."""
    choice = choose(kind, device, probe)
    if choice.kind == "verbs":
        return VerbsTransport(choice.device or "", streams=streams, timeout=timeout, secret=secret)
    return TcpTransport(streams, timeout, secret=secret)
