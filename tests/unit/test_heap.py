"""The malloc settings of the mount (aifs.fuse.heap) and of readers (aifs.client.heap) keep the
buffers they let go in the heap, for the next ones.

Each case runs in a child process, so this process's allocator keeps its defaults.
"""

import os
import platform
import subprocess
import sys

import pytest

# A burst of buffers (1 MiB: requests; 4 MiB: blocks), all freed, many times over: mapped anew
# (or trimmed off the heap's top) each time, their pages are faulted in again.
BURSTS = """
import resource
{setup}
def burst():
    buffers = [bytearray(b"x") * {size} for _ in range({count})]
    del buffers
burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    burst()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
MiB = 1 << 20
PAGES_PER_BURST = 16 * MiB // 4096
KEEP = "from aifs.fuse.heap import keep_request_buffers; keep_request_buffers()"
READER = "from aifs.client import Client; Client()"
FILE = 16 << 10


def faults_after_warmup(setup: str, size: int = MiB, environment: dict[str, str] | None = None) -> int:
    script = BURSTS.format(setup=setup, size=size, count=16 * MiB // size)
    return int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                              text=True, env=os.environ | (environment or {})).stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_request_buffers_are_reused_without_page_faults():
    kept = faults_after_warmup(KEEP)
    default = faults_after_warmup("")
    assert kept < PAGES_PER_BURST, f"{kept} page faults for 20 bursts of reused buffers"
    assert default > 5 * PAGES_PER_BURST, f"glibc's defaults faulted only {default} times: the test proves nothing"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_block_buffers_are_reused_without_page_faults():
    kept = faults_after_warmup(KEEP, size=4 * MiB)
    assert kept < PAGES_PER_BURST, f"{kept} page faults for 20 bursts of reused 4 MiB blocks"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_a_reader_reuses_the_memory_of_files_it_let_go():
    kept = faults_after_warmup(READER, size=FILE)
    chosen = faults_after_warmup(READER, size=FILE, environment={"MALLOC_TRIM_THRESHOLD_": str(128 << 10)})
    assert kept < PAGES_PER_BURST, f"{kept} page faults for 20 bursts of 16 KiB files' bytes"
    assert chosen > 5 * PAGES_PER_BURST, f"the process's own trim threshold was not kept: {chosen} page faults"
