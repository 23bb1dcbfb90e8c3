"""Writers that wait for room in a full staging area: however many there are, the log gets
one line per WAIT_REPORT_S, counting the waits it stands for."""

import errno
import logging

import trio

from aifs.tiers import manager

from .conftest import block, fs_error, trio_test

KB = 1024

WRITERS = 20


def wait_lines(caplog) -> list[str]:
    messages = (r.getMessage() for r in caplog.records if r.name == manager.__name__)
    return [message for message in messages if "uploads to drain" in message]


async def stage_into_full(tiers, first_id: int, count: int) -> None:
    async def writer(block_id: int) -> None:
        with fs_error(errno.ENOSPC):
            await tiers.stage(block_id, block(block_id))

    async with trio.open_nursery() as nursery:
        for block_id in range(first_id, first_id + count):
            nursery.start_soon(writer, block_id)


@trio_test
async def test_many_waiting_writers_make_one_line(tiers_factory, caplog, monkeypatch):
    tiers = tiers_factory(nvme=2 * KB)
    tiers.dirty_wait = 0.2
    await tiers.stage(1, block(1))
    await tiers.stage(2, block(2))
    with caplog.at_level(logging.WARNING, logger=manager.__name__):
        await stage_into_full(tiers, 10, WRITERS)
        assert len(wait_lines(caplog)) == 1, wait_lines(caplog)
        assert "waited 1 time(s)" in wait_lines(caplog)[0]
        monkeypatch.setattr(manager, "WAIT_REPORT_S", 0.0)
        await stage_into_full(tiers, 100, 1)
    assert len(wait_lines(caplog)) == 2 and f"waited {WRITERS} time(s)" in wait_lines(caplog)[1], wait_lines(caplog)
