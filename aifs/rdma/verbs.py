"""The device half of verbs, over pyverbs (module layout of Debian's python3-pyverbs 44).

An opened device (VerbsNic: context, protection domain, port, GID), memory
registration, and reliable-connected queue pairs that post RDMA READs and
wait for their completions. Nothing here can run without an RDMA device;
everything that can (key exchange, slots, buffer pool, selection) lives in
other modules and is tested on its own.
"""

import itertools
import random
import time
from types import SimpleNamespace
from typing import Any

from aifs.rdma.device import load_pyverbs
from aifs.rdma.keys import QpInfo
from aifs.rdma.pool import address_of
from aifs.rdma.transport import TransportError, TransportUnavailable

QP_DEPTH = 16          # READs one queue pair may have outstanding
RD_ATOMIC = 16         # READs in flight per QP, capped by what the device allows
MIN_RNR_TIMER, ACK_TIMEOUT, RETRY_COUNT, RNR_RETRY = 12, 14, 7, 7  # ibv_rc_pingpong's values
DRAIN_TIMEOUT = 1.0


class QueuePairStuck(TransportError):
    """READs timed out and could not be flushed: their buffers may still be written by the NIC."""


def _verbs() -> SimpleNamespace:
    """The pyverbs classes this module uses, imported only once a device is actually opened."""
    if load_pyverbs() is None:
        raise TransportUnavailable("pyverbs is not importable")
    import pyverbs.enums as e
    from pyverbs.addr import GID, AHAttr, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsError
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, SendWR

    return SimpleNamespace(e=e, GID=GID, AHAttr=AHAttr, GlobalRoute=GlobalRoute, CQ=CQ, Context=Context, MR=MR,
                           PD=PD, PyverbsError=PyverbsError, QP=QP, QPAttr=QPAttr, QPCap=QPCap,
                           QPInitAttr=QPInitAttr, SGE=SGE, SendWR=SendWR)


class VerbsNic:
    """One opened RDMA device port."""

    def __init__(self, device: str, port: int = 1, gid_index: int = 0) -> None:
        self.v = _verbs()
        self.ctx = self.v.Context(name=device)
        self.pd = self.v.PD(self.ctx)
        self.port = port
        self.gid_index = gid_index
        self.port_attr = self.ctx.query_port(port)
        self.gid = self.ctx.query_gid(port, gid_index).gid
        attr = self.ctx.query_device()
        self.rd_atomic = max(1, min(RD_ATOMIC, attr.max_qp_rd_atom, attr.max_qp_init_rd_atom))

    def register(self, memory: Any, remote_read: bool) -> Any:
        """An MR over `memory` (kept alive by the caller); remote_read lets peers READ it."""
        e = self.v.e
        access = e.IBV_ACCESS_LOCAL_WRITE | (e.IBV_ACCESS_REMOTE_READ if remote_read else 0)
        return self.v.MR(self.pd, len(memory), access, address=address_of(memory))

    def queue_pair(self, remote_read: bool, depth: int = QP_DEPTH) -> "QueuePair":
        return QueuePair(self, remote_read, depth)

    def close(self) -> None:
        self.pd.close()
        self.ctx.close()


class QueuePair:
    """An RC queue pair with its own completion queue; one thread uses it at a time."""

    def __init__(self, nic: VerbsNic, remote_read: bool, depth: int) -> None:
        v, e = nic.v, nic.v.e
        self.nic = nic
        self.cq = v.CQ(nic.ctx, depth, None, None, 0)
        cap = v.QPCap(max_send_wr=depth, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        init = v.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=1)
        attr = v.QPAttr(port_num=nic.port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | (e.IBV_ACCESS_REMOTE_READ if remote_read else 0)
        self.qp = v.QP(nic.pd, init, attr)  # an RC QP given attributes comes back in INIT
        self.psn = random.getrandbits(24)
        self.broken = False
        self._wr_ids = itertools.count(1)

    def local_info(self) -> QpInfo:
        return QpInfo(self.qp.qp_num, self.psn, self.nic.port_attr.lid, self.nic.gid,
                      self.nic.port_attr.active_mtu)

    def connect(self, remote: QpInfo) -> None:
        """INIT -> RTR -> RTS towards the peer described by `remote`."""
        v = self.nic.v
        attr = v.QPAttr(port_num=self.nic.port)
        attr.path_mtu = min(remote.mtu, self.nic.port_attr.active_mtu)
        attr.dest_qp_num = remote.qp_num
        attr.rq_psn = remote.psn
        attr.sq_psn = self.psn
        attr.max_dest_rd_atomic = attr.max_rd_atomic = self.nic.rd_atomic
        attr.min_rnr_timer, attr.timeout = MIN_RNR_TIMER, ACK_TIMEOUT
        attr.retry_cnt, attr.rnr_retry = RETRY_COUNT, RNR_RETRY
        gid = v.GID()
        gid.gid = remote.gid
        route = v.GlobalRoute(dgid=gid, sgid_index=self.nic.gid_index)
        attr.ah_attr = v.AHAttr(port_num=self.nic.port, is_global=1, gr=route, dlid=remote.lid)
        self.qp.to_rts(attr)

    def read(self, reads: list[tuple[int, int, int]], rkey: int, lkey: int, timeout: float) -> None:
        """RDMA READ each (remote address, local address, length), in order; wait for all of them."""
        v, e = self.nic.v, self.nic.v.e
        try:
            for remote, local, length in reads:
                wr = v.SendWR(wr_id=next(self._wr_ids), opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                              sg=[v.SGE(local, length, lkey)], send_flags=e.IBV_SEND_SIGNALED)
                wr.set_wr_rdma(rkey, remote)
                self.qp.post_send(wr, None)
        except v.PyverbsError as err:
            self.broken = True
            raise TransportError(f"posting an RDMA READ failed: {err}") from None
        self._wait(len(reads), time.monotonic() + timeout)

    def _wait(self, count: int, deadline: float) -> None:
        e = self.nic.v.e
        failed = None
        while count:
            polled, completions = self.cq.poll(count)
            count -= polled
            for wc in completions:
                if wc.status != e.IBV_WC_SUCCESS and failed is None:
                    failed = wc.status
            if polled == 0:
                if time.monotonic() > deadline:
                    self._flush(count)
                    raise TransportError(f"RDMA READ did not complete in time ({count} outstanding)")
                time.sleep(0)  # busy-poll, but let other threads run
        if failed is not None:
            self.broken = True  # an error completion moves an RC QP to the error state for good
            raise TransportError(f"RDMA READ failed with completion status {failed}")

    def _flush(self, outstanding: int) -> None:
        """Move the QP to ERR so outstanding READs complete (flushed) before their buffers are reused."""
        v, e = self.nic.v, self.nic.v.e
        self.broken = True
        self.qp.modify(v.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while outstanding and time.monotonic() < deadline:
            outstanding -= self.cq.poll(outstanding)[0]
        if outstanding:
            raise QueuePairStuck(f"{outstanding} RDMA READs could not be flushed")

    def close(self) -> None:
        self.qp.close()
        self.cq.close()
