"""The mount's malloc settings keep request-sized buffers in the heap (aifs.fuse.heap).

Each case runs in a child process, so this process's allocator keeps its defaults.
"""

import platform
import subprocess
import sys

import pytest

# A burst of 1 MiB request buffers, all freed, many times over: with glibc's defaults each
# burst is mapped anew (or trimmed off the heap's top) and its pages are faulted in again.
BURSTS = """
import resource
{setup}
def burst():
    buffers = [bytearray(b"x") * (1 << 20) for _ in range(16)]
    del buffers
burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    burst()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_PER_BURST = 16 * (1 << 20) // 4096


def faults_after_warmup(setup: str) -> int:
    script = BURSTS.format(setup=setup)
    return int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                              text=True).stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_request_buffers_are_reused_without_page_faults():
    kept = faults_after_warmup("from aifs.fuse.heap import keep_request_buffers; keep_request_buffers()")
    default = faults_after_warmup("")
    assert kept < PAGES_PER_BURST, f"{kept} page faults for 20 bursts of reused buffers"
    assert default > 5 * PAGES_PER_BURST, f"glibc's defaults faulted only {default} times: the test proves nothing"

