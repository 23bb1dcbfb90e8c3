"""Pieces cut anywhere in a JSON Lines file, split where a server would split them and joined
as the client does, give the transform of the whole file: each record exactly once."""

from hypothesis import given, settings, strategies as st

from aifs.push.predicate import Condition
from aifs.push.records import Stitcher
from aifs.push.serving import piece_answer
from aifs.push.servers import PieceAnswer
from aifs.push.transforms import Filter

KEEP_EN = Filter([Condition.parse('lang == "en"')])
RECORD = st.sampled_from([b'{"lang":"en","n":1}', b'{"lang":"de"}', b"", b"junk",
                          b'{"lang":"en","t":"' + b"x" * 40 + b'"}'])


def pieced(data: bytes, cuts: list[int]) -> bytes:
    bounds = [0, *sorted(set(cuts)), len(data)]
    stitcher = Stitcher(KEEP_EN)
    out = b""
    for start, end in zip(bounds, bounds[1:]):
        answer = PieceAnswer(*piece_answer(KEEP_EN, data[start:end]))
        out += stitcher.add(answer.head, answer.result, answer.tail, answer.whole)
    return out + stitcher.finish()


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORD, max_size=30), st.booleans(), st.lists(st.integers(0, 2000), max_size=12))
def test_any_cuts_give_the_whole_files_transform(records, final_newline, cuts):
    data = b"\n".join(records) + (b"\n" if final_newline and records else b"")
    assert pieced(data, [c for c in cuts if c <= len(data)]) == KEEP_EN(data)
