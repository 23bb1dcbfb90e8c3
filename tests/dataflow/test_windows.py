"""How far ahead the mount fetches for a hinted order, and what it gives up: the window keeps to
its files and bytes budgets (the mount's capping a hint's), files already on the node cost
nothing, and fetches of files the reader skipped past, or of a replaced hint, are cancelled."""

from __future__ import annotations

from aifs.dataflow import OrderHint

from .conftest import FILE_BYTES, touch

MiB = 1 << 20


def plan_of(volume, reader: str) -> dict:
    return next(plan for plan in volume.control("prefetch_status")["plans"] if plan["reader"] == reader)


def test_the_window_keeps_to_its_budgets_and_moves_with_the_reader(dataset, watchdog):
    volume = dataset.volume
    volume.cold(files_ahead=32, bytes_ahead="1MiB")  # 1 MiB: 16 files
    hint = OrderHint(dataset.paths, files_ahead=1000)
    [reply] = hint.send()
    assert (reply["files"], reply["files_ahead"], reply["bytes_ahead"]) == (200, 32, MiB)  # capped by the mount
    assert volume.settled()["blocks_fetched"] == 16
    assert volume.tier_hits()["s3"] == 16
    assert plan_of(volume, hint.reader)["window_end"] == 15

    touch(dataset.paths[0])  # the reader reaches file 0: room for one more file
    counts = volume.settled()
    assert (counts["blocks_fetched"], counts["files_ready"]) == (17, 1)

    # Files 0-16 are on the node now: a new hint takes them in for nothing, then two files fit.
    [reply] = OrderHint(dataset.paths, reader=hint.reader, files_ahead=20, bytes_ahead=2 * FILE_BYTES).send()
    assert reply["replaced"]
    counts = volume.settled()
    assert counts["blocks_fetched"] == 19
    assert counts["blocks_wasted"] == 16  # files 1-16 of the replaced hint, fetched and never read
    plan = plan_of(volume, hint.reader)
    assert (plan["window_end"], plan["ahead_bytes"]) == (18, 2 * FILE_BYTES)

    touch(dataset.paths[60])  # a skip ahead: files 17 and 18 are left behind unread
    counts = volume.settled()
    assert (counts["blocks_fetched"], counts["blocks_wasted"], counts["files_missed"]) == (21, 18, 1)
    assert plan_of(volume, hint.reader)["window_end"] == 62
    assert volume.tier_hits()["s3"] == 21


def test_fetches_the_reader_skips_past_are_cancelled(dataset, moto_server, watchdog):
    volume = dataset.volume
    volume.cold()
    hint = OrderHint(dataset.paths[:100], files_ahead=10)
    moto_server.freeze()  # every fetch from S3 hangs until the thaw
    try:
        hint.send()
        assert volume.counts()["in_flight"] == 10
        touch(dataset.paths[50])  # files 0-9 are now more than 10 files behind, unread
        counts = volume.counts()
        assert (counts["blocks_cancelled"], counts["bytes_cancelled"]) == (10, 10 * FILE_BYTES)
        assert (counts["files_missed"], counts["in_flight"]) == (1, 10)  # files 51-60 now

        hint.send(reversed(range(100)))  # a new order from the same reader: files 51-60 are not wanted
        counts = volume.counts()
        assert (counts["blocks_cancelled"], counts["in_flight"]) == (20, 10)
    finally:
        moto_server.thaw()
    counts = volume.settled()
    assert (counts["blocks_fetched"], counts["blocks_cancelled"], counts["blocks_wasted"]) == (10, 20, 0)
    assert plan_of(volume, hint.reader)["window_end"] == 9
