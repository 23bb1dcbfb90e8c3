"""A mount's block server for its peers, as a target of the block-protocol suite: a real aifs mount
(FUSE, a subprocess) of a shared volume on a redis-server and an S3 bucket, serving its tiers on
loopback with the volume's secret. It answers the same calls as a flash server process
(`servers.ServerProcess`), so the same tests drive either.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from redisserver import RedisServer
from s3.conftest import MotoServer
from s3.helpers_mount import S3Setup, S3Volume, poll_status, wait_for

from aifs.rdma.auth import Secret

from .servers import new_secret_file

NVME_CAPACITY = "256MiB"  # what a flash server of the suite is given too: `stat` reports the same capacity


class PeerMount:
    """A one-node shared volume whose mount serves its peers; its blocks live in STATE/nvme."""

    transport = "tcp"  # the only transport peers speak

    def __init__(self, base: Path, moto: MotoServer, redis: RedisServer) -> None:
        self.secret_file = new_secret_file(base / "volume.secret")
        setup = S3Setup(moto.endpoint, moto.create_bucket(), nvme=NVME_CAPACITY, meta={"url": redis.url},
                        cluster={"serve": "127.0.0.1:0", "secret_file": str(self.secret_file)})
        self.volume = S3Volume(base / "node", setup)
        self.address = ""

    @property
    def secret(self) -> Secret:
        return Secret.from_file(self.secret_file)

    @property
    def root(self) -> Path:
        """Where the mount keeps the blocks it serves: its NVMe tier."""
        return self.volume.state_dir / "nvme"

    def start(self) -> "PeerMount":
        """Mount, and learn the address its session advertises. Later mounts serve on that same
        port, as a restarted node does, so a client finds it where it was."""
        self.volume.mount()
        self.address = wait_for(self._advertised, "the mount to advertise its block server", timeout=30)
        self.volume.setup.cluster["serve"] = self.address
        self.volume.write_config()
        return self

    def _advertised(self) -> str:
        sessions = poll_status(self.volume)["metadata"]["sessions"]
        return next((session["peer"] for session in sessions if session["peer"]), "")

    def log_text(self) -> str:
        return self.volume.log_text()

    def signal(self, signum: int) -> None:
        for pid in self.volume.daemon_pids():
            os.kill(pid, signum)

    def stop(self) -> None:
        """Unmount, as an operator would; the state directory stays."""
        self.signal(signal.SIGCONT)
        self.volume.umount()

    def kill(self) -> None:
        """Unmount whatever state the mount is in (a frozen one is thawed first)."""
        self.signal(signal.SIGCONT)
        self.volume.close()
