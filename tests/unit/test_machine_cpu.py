"""MachineCpu: the bench's floor counts the cores the measuring thread may run on, and only
those, so a server kept on a core of its own (--s3-own-core) is left out of it."""

import os
import subprocess
import sys

import pytest

from aifs.bench.measure import MachineCpu

SPIN_S = 1.0
SPIN = f"import time\nend = time.perf_counter() + {SPIN_S}\nwhile time.perf_counter() < end: pass\n"


def spin_on(core: int) -> subprocess.Popen:
    """A process that keeps `core` busy for SPIN_S (its start-up runs on this thread's cores)."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    os.sched_setaffinity(proc.pid, {core})
    return proc


def test_a_core_kept_for_another_process_is_left_out():
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("needs 2 cores")
    server = max(cpus)
    ours = cpus - {server}
    os.sched_setaffinity(0, ours)
    try:
        with MachineCpu() as machine:
            spinners = [spin_on(min(ours)), spin_on(server)]
            for proc in spinners:
                assert proc.wait() == 0
    finally:
        os.sched_setaffinity(0, cpus)
    # both cores were busy for SPIN_S: counting the server's too would give about twice as much
    assert 0.6 * SPIN_S <= machine.cpu_s <= 1.6 * SPIN_S
    assert machine.floor_s == pytest.approx(machine.cpu_s / len(ours))
