"""Measure the metadata engines side by side (a script, not a test):

    cd /work/main && /opt/aifs/bin/python tests/meta/measure_engines.py [--files N]

Starts its own redis-server (appendonly yes, appendfsync always) on 127.0.0.1 and prints the
round trip of a RedisKV get and commit, and file creates and lookups per second through
MetaEngine on RedisKV, CachedKV(RedisKV) and the embedded ShardedRocksKV.
"""

from __future__ import annotations

import argparse
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout's aifs, and the tests' redisserver

from redisserver import RedisServer  # noqa: E402

from aifs.meta import MetaEngine, keys  # noqa: E402
from aifs.meta.cached_kv import CachedKV  # noqa: E402
from aifs.meta.engine import ROOT_INO  # noqa: E402
from aifs.meta.kv import Batch  # noqa: E402
from aifs.meta.redis_kv import RedisKV  # noqa: E402
from aifs.meta.rocks_kv import ShardedRocksKV  # noqa: E402

BLOCK_SIZE = 4 << 20


def round_trips_us(call: Callable[[int], object], count: int) -> tuple[float, float]:
    """(median, 99th percentile) of `count` calls, in microseconds."""
    times = []
    for i in range(count):
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times), statistics.quantiles(times, n=100)[98]


def commit_one(kv: RedisKV, inode: bytes) -> Callable[[int], None]:
    """A create's shape of commit: one read checked, one entry put, one counter moved."""
    def commit(i: int) -> None:
        batch = Batch()
        batch.expect(keys.inode(1), inode)
        batch.put(keys.dentry(1, b"f%d" % i), keys.u64(i))
        batch.add(keys.counter(b"usage.inodes"), 1)
        kv.commit(batch)
    return commit


def per_second(work: Callable[[int], object], count: int) -> float:
    start = time.perf_counter()
    for i in range(count):
        work(i)
    return count / (time.perf_counter() - start)


def creates_and_lookups(kv, files: int) -> tuple[float, float]:
    """Creates per second, then lookups per second of those names (each looked up twice)."""
    meta = MetaEngine(kv, BLOCK_SIZE)
    creates = per_second(lambda i: meta.create(ROOT_INO, b"file%07d" % i, stat.S_IFREG | 0o644, 0, 0), files)
    lookups = per_second(lambda i: meta.lookup(ROOT_INO, b"file%07d" % (i % files)), 2 * files)
    kv.close()
    return creates, lookups


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        server = RedisServer(Path(scratch) / "redis")
        server.start()
        try:
            kv = RedisKV.connect(server.url)
            batch = Batch()
            batch.put(keys.inode(1), b"x" * 64)
            kv.commit(batch)
            get_p50, get_p99 = round_trips_us(lambda i: kv.get(keys.inode(1)), args.calls)
            commit_p50, commit_p99 = round_trips_us(commit_one(kv, kv.get(keys.inode(1))), args.calls)
            kv.close()
            print(f"RedisKV get:    p50 {get_p50:6.0f} us   p99 {get_p99:6.0f} us")
            print(f"RedisKV commit: p50 {commit_p50:6.0f} us   p99 {commit_p99:6.0f} us  (1 read, 1 put, 1 counter)")
            for name, make in [("RedisKV", lambda: RedisKV.connect(server.url)),
                               ("CachedKV(RedisKV)", lambda: CachedKV(RedisKV.connect(server.url))),
                               ("ShardedRocksKV", lambda: ShardedRocksKV(Path(tempfile.mkdtemp(dir=scratch)), 8))]:
                server.flush()
                creates, lookups = creates_and_lookups(make(), args.files)
                print(f"MetaEngine on {name:18s} creates/s {creates:8.0f}   lookups/s {lookups:8.0f}")
        finally:
            server.kill()

if __name__ == "__main__":
    main()
