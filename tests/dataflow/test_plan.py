"""A plan follows its reader through the order: reads a little out of order (several workers)
keep the files just behind the cursor, a file hinted twice is matched to its next unread place,
and a read far outside the span around the reader is not this reader's."""

from __future__ import annotations

from aifs.meta.attrs import BlockRef
from aifs.vfs.sampleorder import FOLLOW_SLACK, FileFetch, Plan

BLOCK = 100


def fill(plan: Plan) -> list[int]:
    """Take every position the window offers, one block of BLOCK bytes each, while they fit."""
    taken = []
    for position in plan.window():
        fetch = FileFetch(plan.inodes[position], [BlockRef(position, 0, BLOCK, 0)])
        if not plan.room_for(fetch.nbytes):
            break
        plan.take(position, fetch)
        taken.append(position)
    return taken


def test_the_window_follows_the_furthest_read_and_keeps_files_just_behind():
    plan = Plan("r", [100 + i for i in range(50)], files_ahead=4, bytes_ahead=10 * BLOCK, now=0.0)
    assert fill(plan) == [0, 1, 2, 3]
    assert plan.read(102) == 2  # a worker reads file 2 first: files 0 and 1 are still wanted
    assert (plan.cursor, plan.ahead_bytes, plan.left_behind()) == (2, BLOCK, [])
    assert fill(plan) == [4, 5, 6]
    assert plan.read(100) == 0  # a read behind the cursor leaves the cursor where it is
    assert plan.cursor == 2

    assert plan.read(109) == 9  # a skip: files 1 to 4 are more than 4 behind, unread ones given up
    assert [fetch.ino for fetch in plan.left_behind() if not fetch.read] == [101, 103, 104]
    assert fill(plan) == [10, 11, 12, 13]


def test_a_file_hinted_twice_is_matched_to_its_next_unread_place():
    plan = Plan("r", [7, 8, 7, 9, 7], files_ahead=2, bytes_ahead=10 * BLOCK, now=0.0)
    assert [plan.read(7), plan.read(7), plan.read(7), plan.read(7)] == [0, 2, 4, None]


def test_reads_past_the_followed_span_are_not_the_readers():
    order = list(range(1, 10 * FOLLOW_SLACK))
    plan = Plan("r", order, files_ahead=8, bytes_ahead=BLOCK, now=0.0)
    last = 8 - 1 + FOLLOW_SLACK  # the window ends at 7; the span FOLLOW_SLACK past it
    assert plan.read(order[last + 1]) is None
    assert plan.read(order[last]) == last
    plan.left_behind()
    assert plan.read(order[last + 8 + FOLLOW_SLACK]) == last + 8 + FOLLOW_SLACK  # the span moved on
    assert plan.read(order[3]) is None  # left behind
