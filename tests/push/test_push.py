"""`aifs push` through a real mount and real flash servers: results byte for byte those of the
same transform run on the client over the whole files, records crossing block boundaries
included; servers that refuse a transform or are killed mid-run leave the output the same,
and a job that fails leaves no output under a result's name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import aifs_cli  # tests/conftest.py
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

import aifs.push
from aifs.push.mask import BUILTIN, Mask
from aifs.push.predicate import Condition
from aifs.push.tokenize import Tokenize, tokenizer_hash
from aifs.push.transforms import Filter
from aifs.rdma.tcp import TcpTransport
from aifs.rdma.transport import Address, RemoteError

from .conftest import PushSetup

WHERE = ('lang == "en"', "score >= 0.5")


def expected(setup: PushSetup, transform) -> dict[str, bytes]:
    """The transform run on the client over each whole file."""
    return {name: transform(data) for name, data in setup.files.items()}


def results(out: Path, setup: PushSetup) -> dict[str, bytes]:
    assert sorted(os.listdir(out)) == sorted(setup.files), "only the results, no temporary files"
    return {name: (out / name).read_bytes() for name in setup.files}


def small_tokenizer(path: Path, setup: PushSetup) -> Path:
    """A BPE tokenizer trained here on the test's own text."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    texts = [line.decode(errors="replace") for data in setup.files.values() for line in data.splitlines()[:200]]
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    tokenizer.save(str(path))
    return path


def test_filter_through_the_cli_runs_on_the_servers_and_equals_the_client(pushed: PushSetup):
    out = pushed.volume.path / "filtered"
    cp = aifs_cli("push", "filter", *[arg for w in WHERE for arg in ("--where", w)], str(pushed.source),
                  "--out", str(out), "--json", timeout=60)
    assert cp.returncode == 0, cp.stderr
    report = json.loads(cp.stdout)
    total = sum(map(len, pushed.files.values()))
    assert (report["files"], report["bytes_in"], report["on_servers"]) == (2, total, total), report
    assert report["moved"] < 0.75 * total, report  # results and boundary records travel, not the files
    assert results(out, pushed) == expected(pushed, Filter([Condition.parse(w) for w in WHERE]))
    assert all(results(out, pushed).values())


def test_mask_skips_the_server_that_does_not_run_it(pushed: PushSetup):
    """The third server runs only filter: its pieces go to the other copy."""
    out = pushed.volume.path / "masked"
    notes = []
    report = aifs.push.mask([pushed.source], out, patterns=["email", "phone"], note=notes.append)
    masked = expected(pushed, Mask([BUILTIN["email"], BUILTIN["phone"]]))
    assert results(out, pushed) == masked
    assert b"<EMAIL>" in masked["a.jsonl"] and b"@example.org" not in masked["a.jsonl"]
    assert report.on_servers == report.bytes_in, report
    assert any(pushed.servers[2].address in note and "--transforms mask" in note for note in notes), notes


def test_tokenize_with_a_tokenizer_from_the_volume(pushed: PushSetup, tmp_path):
    tokenizer = small_tokenizer(pushed.volume.path / "tokenizer.json", pushed)
    out = pushed.volume.path / "tokens"
    report = aifs.push.tokenize([pushed.source], out, tokenizer=tokenizer, field="text")
    want = expected(pushed, Tokenize(tokenizer.read_bytes(), "text"))
    assert results(out, pushed) == want
    assert report.on_servers > 0, report
    lines = want["a.jsonl"].splitlines()
    assert len(lines) == pushed.files["a.jsonl"].count(b"\n") and json.loads(lines[0])


def transform_request(server, job, payload: bytes | None = None) -> RemoteError:
    connection = TcpTransport(1, 5.0, secret=server.secret).connect(Address.parse(server.address))
    try:
        with pytest.raises(RemoteError) as refused:
            connection.call({"op": "transform", "id": 1, "job": job}, memoryview(payload) if payload else None,
                            timeout=5.0)
        return refused.value
    finally:
        connection.close()


def test_a_server_refuses_what_its_admin_did_not_enable_clearly(pushed: PushSetup):
    refused = transform_request(pushed.servers[2], {"name": "tokenize", "args": {}})
    assert refused.code == "refused" and "--transforms tokenize" in str(refused)
    refused = transform_request(pushed.servers[0], {"name": "mask", "args": {"patterns": [["email", ".*", "X"]]}})
    assert refused.code == "refused" and "'email' is not registered on this server" in str(refused)
    assert transform_request(pushed.servers[0], "rm -rf /").code == "bad"


@pytest.mark.parametrize("job, payload", [
    ({"name": "filter", "args": {"where": "lang"}}, None),
    ({"name": "filter", "args": {"where": [[1, "==", 1]]}}, None),
    ({"name": "filter", "args": {"where": [["a", "<", [1]]]}}, None),
    ({"name": "mask", "args": {"patterns": [["a"]]}}, None),
    ({"name": "mask", "args": {}}, None),
    ({"name": "tokenize", "args": {"tokenizer": 5}}, b"{}"),
    ({"name": "tokenize", "args": {"tokenizer": "0" * 32, "field": [3]}}, b"not json"),
    ({"name": "tokenize", "args": {"tokenizer": "0" * 32}}, b"not json"),
    ({"name": "tokenize", "args": {"tokenizer": tokenizer_hash(b"{}")}}, b"{}"),
    ({"name": "eval", "args": {}}, None),
])
def test_malformed_jobs_are_refused_and_leave_the_server_serving(pushed: PushSetup, job, payload):
    assert transform_request(pushed.servers[0], job, payload).code in ("refused", "tokenizer")
    assert "Traceback" not in pushed.servers[0].log.read_text()


def test_bad_input_is_one_clear_line(pushed: PushSetup):
    out = pushed.volume.path / "never"
    cp = aifs_cli("push", "filter", "--where", "lang = en", str(pushed.source), "--out", str(out), timeout=60)
    assert cp.returncode == 1 and "Traceback" not in cp.stderr
    assert "is not a condition; write FIELD OP VALUE" in cp.stderr
    cp = aifs_cli("push", "mask", "--pattern", "ssn", str(pushed.source), "--out", str(out), timeout=60)
    assert cp.returncode == 1 and "no mask pattern named 'ssn'" in cp.stderr


def test_servers_killed_mid_run_change_nothing_in_the_output(pushed: PushSetup):
    """After the first piece one server is SIGKILLed, after the tenth the second: the job goes
    on with the last server and the client, and no result appears before it is complete."""
    out = pushed.volume.path / "after-kill"
    transform = Filter([Condition.parse(w) for w in WHERE])
    killed: list[int] = []
    outputs = [out / name for name in pushed.files]

    def progress(report) -> None:
        done = report.on_servers + report.on_client
        for index, after in ((0, 1), (1, 10 * (64 << 10))):
            if done >= after and index not in killed:
                pushed.servers[index].kill()
                killed.append(index)
        assert report.files == 2 or not outputs[report.files].exists(), "a result in place before it is complete"

    try:
        report = aifs.push.filter([pushed.source], out, where=WHERE, progress=progress, timeout=10.0)
        assert killed == [0, 1]
        assert results(out, pushed) == expected(pushed, transform)
        assert report.on_client > 0 and report.on_servers > 0, report
    finally:
        for index in killed:
            pushed.servers[index].start()


def test_a_job_that_fails_leaves_no_partial_result(pushed: PushSetup):
    out = pushed.volume.path / "failed"

    def fail_midway(report) -> None:
        if report.bytes_in > 5 * (64 << 10):
            raise RuntimeError("stopped midway")

    with pytest.raises(RuntimeError, match="stopped midway"):
        aifs.push.filter([pushed.source], out, where=WHERE, progress=fail_midway)
    assert os.listdir(out) == []
