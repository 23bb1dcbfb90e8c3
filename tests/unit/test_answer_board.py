"""The answer board: a reader finds the newest answer posted for a path, or nothing; never the
answer of another path, one overwritten as the ring wrapped, or bytes changed under it."""

import errno
import mmap
import os
from collections.abc import Callable

import pytest

from aifs.bypass.board import AnswerBoard, BoardView
from aifs.bypass.changes import EVERYTHING
from aifs.config.models import MiB


def answer(n: int) -> dict:
    block = {"index": 0, "offset": 0, "length": n, "checksum": n + 1, "segment": 3, "at": n * 10, "object": n}
    return {"size": n, "blocks": [block], "stamp": [0, 7, n]}


def found(n: int) -> tuple:
    """What a reader finds for answer(n): the stamp split into its counters and their values."""
    return n, 65536, ((0, 0, n, n + 1, 3, n * 10, n, None),), (EVERYTHING, 7), (0, n)


@pytest.fixture
def board():
    made = AnswerBoard(1 * MiB)
    view = BoardView(os.dup(made.fd))
    yield made, view
    view.close()
    made.close()


def test_the_newest_answer_posted_for_a_path_is_found(board):
    made, view = board
    assert view.look(b"a/b") is None
    made.post(b"a/b", answer(1), 65536)
    made.post(b"a/b", answer(2), 65536)
    assert view.look(b"a/b") == found(2)
    assert view.look(b"a/c") is None


def test_paths_that_share_a_slot_all_keep_their_answers(board):
    made, view = board
    paths = [b"dir/%05d" % i for i in range(3000)]  # two slots each and no moves lost 6 of them
    for i, path in enumerate(paths):
        made.post(path, answer(i), 65536)
    assert [view.look(path) for path in paths] == [found(i) for i in range(len(paths))]


@pytest.fixture
def small_board():
    """128 slots: paths that share both of another path's slots are easy to find."""
    made = AnswerBoard(4096)
    view = BoardView(os.dup(made.fd))
    yield made, view
    view.close()
    made.close()


def path_in(made: AnswerBoard, prefix: bytes, wanted: Callable[[tuple[int, int]], bool]) -> bytes:
    """A path whose two slots are `wanted`."""
    return next(p for i in range(1_000_000) if wanted(made.layout.slots_of(p := prefix + b"%d" % i)))


def test_a_path_whose_two_slots_others_took_moves_one_of_them_to_its_other_slot(small_board):
    made, view = small_board
    first, second = made.layout.slots_of(b"old")
    beside = path_in(made, b"b", lambda slots: slots[0] == second and slots[1] not in (first, second))
    newer = path_in(made, b"n", lambda slots: slots == (first, second))
    for n, path in enumerate((b"old", beside, newer)):
        made.post(path, answer(n), 65536)
    assert (view.look(b"old"), view.look(beside), view.look(newer)) == (found(0), found(1), found(2))


def test_a_path_whose_two_slots_others_took_for_good_displaces_the_older_answer(small_board):
    made, view = small_board
    first, second = made.layout.slots_of(b"old")
    beside = path_in(made, b"b", lambda slots: slots == (second, first))  # neither can move: each one's other slot is taken
    newer = path_in(made, b"n", lambda slots: slots == (first, second))
    for n, path in enumerate((b"old", beside, newer)):
        made.post(path, answer(n), 65536)
    assert (view.look(b"old"), view.look(beside), view.look(newer)) == (None, found(1), found(2))


def test_answers_overwritten_as_the_ring_wraps_are_gone_and_the_rest_right(board):
    made, view = board
    paths = [b"dir/%06d" % i for i in range(made.layout.ring // 100 * 3)]  # about three times round the ring
    for i, path in enumerate(paths):
        made.post(path, answer(i), 65536)
    seen = {path: view.look(path) for path in paths}
    assert all(seen[path] in (None, found(i)) for i, path in enumerate(paths))
    assert seen[paths[-1]] == found(len(paths) - 1) and seen[paths[0]] is None


def test_a_record_whose_bytes_changed_under_the_reader_is_no_answer(board):
    made, view = board
    made.post(b"a", answer(1), 65536)
    at = made.layout.ring_at + (made._slots[made.layout.slots_of(b"a")[0]] >> 24)
    made._map[at + 20] ^= 0xFF
    assert view.look(b"a") is None


def test_an_answer_too_large_for_the_ring_is_not_posted(board):
    made, view = board
    made.post(b"big", answer(1), 65536)
    made.post(b"big", answer(1) | {"blocks": answer(1)["blocks"] * (made.layout.ring // 44)}, 65536)
    assert view.look(b"big") == found(1)


def test_readers_cannot_write_the_board(board):
    made, view = board
    with pytest.raises(TypeError):
        view.map[0] = 1
    fd = os.dup(made.fd)
    try:
        with pytest.raises(PermissionError) as caught:
            mmap.mmap(fd, made.layout.size)  # shared and writable
        assert caught.value.errno == errno.EPERM
    finally:
        os.close(fd)


def test_an_answer_of_many_blocks_and_counters_is_found_whole(board):
    made, view = board
    blocks = [{"index": i, "offset": 0, "length": 10, "checksum": i + 1, "segment": 3, "at": i * 10, "object": 10}
              for i in range(3)]
    made.post(b"many", {"size": 30, "blocks": blocks, "stamp": [4, 7, 1, 9, 2, 11, 3]}, 16)
    assert view.look(b"many") == (30, 16, tuple((i, 0, 10, i + 1, 3, i * 10, 10, None) for i in range(3)),
                                  (EVERYTHING, 7, 9, 11), (4, 1, 2, 3))
