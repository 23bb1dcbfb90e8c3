"""The nodes of one shared volume in a bench mode, aifs' or JuiceFS', mounted together and
restarted together with nothing cached, so that a measurement can start every node cold.

Each node has a folder of its own (state directory or cache, mountpoint), as a machine
of its own would; all of them are unmounted when the ExitStack they were made in closes.
"""

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Protocol

from aifs.bench import juicefs
from aifs.bench.measure import GiB, MiB
from aifs.bench.scratch import S3Target, ScratchVolume, aifs_cli, table, tier
from aifs.bench.workload import BenchError

RAM = tier("ram", capacity=256 * MiB)
NVME = tier("nvme", capacity=2 * GiB)
PEERS_TIMEOUT_S = 60.0
PEERS_HEARTBEAT_S = 1.0  # peers find each other at heartbeats: nodes started together meet within one


class Fleet(Protocol):
    """What a measurement may do with the nodes: use their mountpoints, wait until what they
    wrote is uploaded, and restart them all cold (which waits for that first: a node's
    staged blocks must not go with its cache)."""

    nodes: list[Path]

    def settle(self) -> None: ...

    def restart_cold(self) -> None: ...


class AifsFleet:
    """`count` aifs nodes of one volume: metadata in `meta_url` (a RocksDB of its own when None,
    one node only), the tiers RAM, NVMe and the S3 target, and `configure`'s choices."""

    def __init__(self, stack: ExitStack, root: Path, target: S3Target, meta_url: str | None, count: int,
                 cluster: dict | None = None) -> None:
        self._volumes = [ScratchVolume(_folder(root / f"node{i}")) for i in range(count)]
        self._target, self._meta_url = target, meta_url
        self.configure(cluster=cluster)
        if meta_url is not None:
            aifs_cli("format", "-c", str(self._configs[0]))
        self._mounts = ExitStack()
        stack.callback(lambda: self._mounts.close())
        self.nodes = self._mount()

    def configure(self, remote: str = "", cluster: dict | None = None) -> None:
        """What the nodes mount with from their next start on: a remote tier (`remote`, a
        `[[tiers]]` table) above S3 if given, and the `[cluster]` keys (`serve` makes the
        nodes peers, with heartbeats every PEERS_HEARTBEAT_S)."""
        self._peers = bool(cluster and cluster.get("serve"))
        tables = [remote, self._target.tier()]
        if self._meta_url is not None:
            beat = {"heartbeat": PEERS_HEARTBEAT_S} if self._peers else {}
            tables.append(table("[meta]", url=self._meta_url, **beat))
        if cluster:
            tables.append(table("[cluster]", **cluster))
        self._configs = [volume.config("node", RAM, NVME, *tables) for volume in self._volumes]

    def _mount(self) -> list[Path]:
        self._mounts = ExitStack()
        return _mount_together(self._mounts, [volume.mounted(config)
                                              for volume, config in zip(self._volumes, self._configs)])

    def settle(self) -> None:
        """Wait until every node has uploaded what it staged (`aifs sync --wait` on each)."""
        for volume, mountpoint in zip(self._volumes, self.nodes):
            volume.sync(mountpoint)

    def restart_cold(self) -> None:
        """Once its uploads are done, unmount every node (RAM and the kernel's page cache go),
        empty its NVMe, mount it again, and wait until peers see each other."""
        self.settle()
        self._mounts.close()
        for volume in self._volumes:
            volume.wipe_nvme()
        self.nodes = self._mount()
        if self._peers:
            self._wait_for_peers()

    def _wait_for_peers(self) -> None:
        """A node learns of the others from their sessions at its heartbeats."""
        deadline = time.monotonic() + PEERS_TIMEOUT_S
        for volume in self._volumes:
            while len(volume.status()["tiers"].get("peers", {}).get("servers", [])) < len(self._volumes) - 1:
                if time.monotonic() > deadline:
                    raise BenchError(f"the aifs nodes did not see each other as peers in {PEERS_TIMEOUT_S:.0f} s")
                time.sleep(0.2)


class JuiceFleet:
    """`count` JuiceFS nodes of a new volume in `meta_url` on the S3 target."""

    def __init__(self, stack: ExitStack, root: Path, target: S3Target, meta_url: str, count: int) -> None:
        juicefs.format_volume(meta_url, f"aifs-bench-{root.name}", target)
        self._root, self._meta_url, self._count = root, meta_url, count
        self._start = 0
        self._mounts = ExitStack()
        stack.callback(lambda: self._mounts.close())
        self.nodes = self._mount()

    def _mount(self) -> list[Path]:
        self._mounts = ExitStack()
        return juicefs.mount_nodes(self._mounts, self._meta_url, self._root / f"start{self._start}", self._count)

    def settle(self) -> None:
        juicefs.settle(self.nodes)

    def restart_cold(self) -> None:
        """Once its uploads are done, unmount every node and mount it again with a new, empty
        cache directory."""
        self.settle()
        self._mounts.close()
        shutil.rmtree(self._root / f"start{self._start}")
        self._start += 1
        self.nodes = self._mount()


def _mount_together(stack: ExitStack, mounts: list[AbstractContextManager[Path]]) -> list[Path]:
    """Every node mounted at once, as the machines of a cluster start; `stack` unmounts the
    ones that were mounted, also when another failed to (whose error is raised)."""
    with ThreadPoolExecutor(len(mounts)) as pool:
        started = [pool.submit(mount.__enter__) for mount in mounts]
    for mount, future in zip(mounts, started):
        if future.exception() is None:
            stack.push(mount.__exit__)
    return [future.result() for future in started]


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path
