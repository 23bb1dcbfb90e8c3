"""The mount's malloc settings keep request- and block-sized buffers in the heap (aifs.fuse.heap).

Each case runs in a child process, so this process's allocator keeps its defaults.
"""

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


def faults_after_warmup(setup: str, size: int = MiB) -> int:
    script = BURSTS.format(setup=setup, size=size, count=16 * MiB // size)
    return int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                              text=True).stdout)


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
