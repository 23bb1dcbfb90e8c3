"""Assembling a file from an answer's blocks (aifs/bypass/_reader.c through aifs.client.assemble):
the bytes are the file's, holes are zeros, and an object that does not match its checksum, for
whatever reason, is never returned but named by its segment."""

import mmap
import os
from functools import partial

import pytest

from aifs.bypass import _reader
from aifs.bypass.board import AnswerBoard, BoardView
from aifs.client.assemble import Mismatch, assemble
from aifs.config.models import MiB
from aifs.tiers.checksum import checksum

SEGMENT = 7


@pytest.fixture
def segment(tmp_path):
    """A segment file holding objects a, b, c back to back, and its descriptors by number."""
    objects = [b"a" * 100, bytes(range(256)) * 4, b"c" * 50]
    path = tmp_path / "segment"
    path.write_bytes(b"".join(objects))
    fd = os.open(path, os.O_RDONLY)
    yield objects, {SEGMENT: fd}
    os.close(fd)


def block(index: int, objects: list[bytes], which: int, offset: int = 0, length: int | None = None,
          wrong: bool = False) -> tuple:
    """A block of the file at `index` that is object `which` of the segment, from `offset`."""
    at = sum(len(o) for o in objects[:which])
    data = objects[which]
    return (index, offset, len(data) - offset if length is None else length, checksum(data) ^ wrong, SEGMENT, at,
            len(data), None)


def test_a_file_of_one_whole_object_is_that_object(segment):
    objects, fds = segment
    assert assemble(1024, 4096, (block(0, objects, 1),), fds) == objects[1]


def test_blocks_land_at_their_index_with_holes_as_zeros(segment):
    objects, fds = segment
    blocks = (block(0, objects, 0), block(2, objects, 1, offset=24, length=60))
    assert assemble(300, 128, blocks, fds) == objects[0] + bytes(156) + objects[1][24:68]


def test_a_block_past_the_end_of_the_file_is_cut_at_the_end(segment):
    objects, fds = segment
    assert assemble(30, 4096, (block(0, objects, 2),), fds) == objects[2][:30]
    assert assemble(80, 4096, (block(0, objects, 2),), fds) == objects[2] + bytes(30)


def test_an_inline_object_is_used_as_sent():
    data = b"inline bytes"
    assert assemble(len(data), 4096, ((0, 0, len(data), checksum(data), None, 0, 0, data),), {}) == data


@pytest.mark.parametrize("damage", ["checksum", "not held", "past the end of the segment", "inline"])
def test_an_object_that_does_not_match_is_named_never_returned(segment, damage):
    objects, fds = segment
    good = block(0, objects, 1)
    broken = {
        "checksum": (block(0, objects, 1, wrong=True), SEGMENT),
        "not held": (good[:4] + (SEGMENT + 1,) + good[5:], SEGMENT + 1),
        "past the end of the segment": (good[:5] + (good[5] + 1000,) + good[6:], SEGMENT),
        "inline": ((0, 0, 5, checksum(b"right"), None, 0, 0, b"wrong"), None),
    }[damage]
    with pytest.raises(Mismatch) as caught:
        assemble(1024, 4096, (block(1, objects, 0), broken[0]), fds)
    assert caught.value.segment == broken[1]


def test_an_answer_at_odds_with_itself_is_a_mismatch(segment):
    objects, fds = segment
    with pytest.raises(Mismatch):  # asks for more of the object than it has
        assemble(1024, 4096, (block(0, objects, 0, offset=90, length=20),), fds)


def test_a_kept_answer_reads_only_while_its_counters_show_its_values(segment):
    objects, fds = segment
    counters = mmap.mmap(-1, 8 * 16)
    counters[8 * 3:8 * 4] = (5).to_bytes(8, "little")
    kept = {b"f": (1024, 4096, (block(0, objects, 1),), (1, 3), (0, 5))}
    answer = partial(_reader.answer, kept, None, 0, 0, counters, fds, 10)
    assert answer(b"f") == (objects[1], False)
    assert answer(b"other") is None
    assert _reader.shows(counters, (1, 3), (0, 5))
    counters[8 * 3] = 6
    assert answer(b"f") is None and not kept  # forgotten
    assert not _reader.shows(counters, (1, 3), (0, 5))
    assert not _reader.shows(counters, (1, 16), (0, 0))  # counters the table does not have
    assert not _reader.shows(counters, (1, 2**64 - 1), (0, 0))


def test_a_kept_answer_whose_bytes_no_longer_match_is_forgotten(segment):
    objects, fds = segment
    kept = {b"f": (1024, 4096, (block(0, objects, 1, wrong=True),), (1,), (0,))}
    assert _reader.answer(kept, None, 0, 0, mmap.mmap(-1, 16), fds, 10, b"f") is None and not kept


def test_a_posted_answer_that_holds_is_read_and_kept_as_the_readers_own(segment):
    objects, fds = segment
    board = AnswerBoard(1 * MiB)
    view = BoardView(os.dup(board.fd))
    try:
        at = len(objects[0])
        answer = {"size": 1024, "stamp": [0, 3, 5], "blocks": [{"index": 0, "offset": 0, "length": 1024,
                  "checksum": checksum(objects[1]), "segment": SEGMENT, "at": at, "object": 1024}]}
        board.post(b"f", answer, 4096)
        counters, kept = mmap.mmap(-1, 8 * 16), {}
        counters[8 * 3:8 * 4] = (5).to_bytes(8, "little")
        read = partial(_reader.answer, kept, view.map, view.layout.slots, view.layout.ring_at, counters, fds, 10)
        assert read(b"f") == (objects[1], True)
        assert read(b"f") == (objects[1], False) and list(kept) == [b"f"]
        assert read(b"g") is None
    finally:
        view.close()
        board.close()


def test_the_oldest_kept_answers_make_room():
    kept: dict = {}
    for n in range(5):
        _reader.hold(kept, b"%d" % n, (n,), 3)
    assert list(kept) == [b"2", b"3", b"4"]


def test_a_layout_that_does_not_fit_the_board_is_refused():
    with pytest.raises(ValueError):
        _reader.look(mmap.mmap(-1, 4096), 1024, 8192, b"path")
