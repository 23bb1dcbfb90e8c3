"""A block server process against clients that lack the secret, replay, lie about sizes, send
garbage, hog descriptors or go quiet: it refuses them, stays up, and keeps serving the others.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import threading
import time
from pathlib import Path

import msgpack
import pytest
import trio

from aifs.flash.limits import ServerLimits
from aifs.rdma.auth import AuthError, RequestMacs, Secret
from aifs.rdma.loop_tcp import LoopTcpReader
from aifs.rdma.tcp import TcpConnection
from aifs.rdma.transport import Address, RemoteError, TransportError
from aifs.rdma.wire import MAX_PAYLOAD, PREFIX, TAG_BYTES, frame
from aifs.tiers.checksum import checksum

from .blocks import content
from .raw import RawClient
from .test_loop_reads import read as loop_read

MiB = 1 << 20
WRONG = Secret(b"not the secret of this server, but long enough")


def connect(server, secret: Secret | None = None, streams: int = 1) -> TcpConnection:
    return TcpConnection(Address.parse(server.address), streams, 5.0, secret=secret or server.secret)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def still_serving(server) -> None:
    """The process lives and a good client's put, get and stat work."""
    assert server.proc.poll() is None, server.log.read_text()
    conn = connect(server)
    try:
        block_id = random.randrange(1 << 40, 1 << 41)
        conn.write(block_id, content(block_id, 5000))
        assert conn.read(block_id) == content(block_id, 5000)
        assert conn.stat().capacity > 0
    finally:
        conn.close()


# -- authentication ----------------------------------------------------------------------


def test_without_the_secret_no_block_can_be_read_written_deleted_or_unpinned(flash_servers):
    (server,) = flash_servers(1)
    good = connect(server)
    good.write(1, b"pinned and precious", pin=True)
    wrong = connect(server, WRONG)
    for attempt in (lambda: wrong.read(1), lambda: wrong.write(2, b"intruder"), lambda: wrong.delete(1),
                    lambda: wrong.unpin(1), lambda: wrong.contains(1), lambda: wrong.stat()):
        with pytest.raises(AuthError, match="refused our secret"):
            attempt()
    wrong.close()

    with RawClient(server.port) as raw:  # skips the handshake: its requests are not even decoded
        raw.send(frame({"op": "del", "id": 1, "rid": 1}))
        answer, _ = raw.receive()
        assert answer["err"] == "auth" and raw.hung_up()
    for header, payload in [({"op": "unpin", "id": 1}, b""), ({"op": "put", "id": 3, "sum": checksum(b"x")}, b"x"),
                            ({"op": "get", "id": 1}, b""), ({"op": "qp", "qp": {}}, b"")]:
        with RawClient(server.port, server.secret) as raw:  # authenticated, but the request's MAC is forged
            raw.send(frame({**header, "rid": 1}, len(payload)) + bytes(TAG_BYTES) + payload)
            answer, _ = raw.receive()
            assert answer["err"] == "auth" and raw.hung_up(), header
    with RawClient(server.port, server.secret) as raw:  # a MAC under another key
        raw.macs = RequestMacs(b"a session key of some other connection")
        raw.send(raw.signed({"op": "del", "id": 1, "rid": 1}))
        assert raw.receive()[0]["err"] == "auth" and raw.hung_up()

    assert good.read(1) == b"pinned and precious"
    assert not good.contains(2) and not good.contains(3)
    assert good.stat().pinned == 1
    good.close()
    still_serving(server)


def test_a_client_that_cannot_prove_the_secret_gets_nothing(flash_servers):
    (server,) = flash_servers(1)
    with RawClient(server.port) as raw:
        raw.send(frame({"nonce": b"\0" * 32, "mac": b"\0" * 32}))
        answer, _ = raw.receive()
        assert answer["err"] == "auth" and "does not hold" in answer["msg"] and raw.hung_up()
    with RawClient(server.port) as raw:  # the hello's fields of the wrong types
        raw.send(frame({"nonce": "text", "mac": 7}))
        assert raw.receive()[0]["err"] == "auth" and raw.hung_up()
    still_serving(server)


def test_a_server_that_cannot_prove_the_secret_is_sent_no_request():
    """Both sides prove the secret: a client does not trust whatever answers on the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    heard_after_proof: list[bytes] = []

    def impostor() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            conn.sendall(frame({"auth": "hmac-sha256", "nonce": b"\1" * 32}))
            conn.recv(4096)  # the client's proof: of no use without the secret
            conn.sendall(frame({"mac": b"\0" * 32}))
            heard_after_proof.append(conn.recv(4096))

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    conn = TcpConnection(Address("127.0.0.1", listener.getsockname()[1]), 1, 5.0, secret=WRONG)
    with pytest.raises(AuthError, match="does not hold our secret"):
        conn.write(1, b"for the real server only")
    conn.close()
    thread.join(10)
    listener.close()
    assert heard_after_proof == [b""]  # it hung up without sending the request


def test_a_replayed_request_is_refused(flash_servers):
    (server,) = flash_servers(1)
    good = connect(server)
    good.write(7, b"seven")
    with RawClient(server.port, server.secret) as first:
        delete = first.signed({"op": "del", "id": 7, "rid": 1})
        first.send(delete)
        assert first.receive()[0] == {"rid": 1}
        good.write(7, b"seven")  # put back; the captured delete is sent again
        first.send(delete)
        assert first.receive()[0]["err"] == "auth" and first.hung_up()
    assert good.read(7) == b"seven"
    with RawClient(server.port, server.secret) as second:  # on another connection: another key
        second.send(delete)
        assert second.receive()[0]["err"] == "auth" and second.hung_up()
    with RawClient(server.port, server.secret) as third:  # in the wrong order
        one, two = third.signed({"op": "has", "id": 7, "rid": 1}), third.signed({"op": "del", "id": 7, "rid": 2})
        third.send(two + one)
        assert third.receive()[0]["err"] == "auth" and third.hung_up()
    with RawClient(server.port, server.secret) as fourth:  # a header changed after signing
        signed = fourth.signed({"op": "has", "id": 7, "rid": 1})
        fourth.send(signed.replace(b"has", b"del"))
        assert fourth.receive()[0]["err"] == "auth" and fourth.hung_up()
    assert good.read(7) == b"seven"
    good.close()


# -- memory --------------------------------------------------------------------------------


def announce_put(raw: RawClient, block_id: int, nbytes: int, sent: bytes = b"") -> None:
    raw.send(raw.signed({"op": "put", "id": block_id, "sum": 0, "rid": block_id}, nbytes) + sent)


def test_a_header_announcing_a_gigabyte_costs_the_server_no_memory(flash_servers):
    (server,) = flash_servers(1, options=("--max-request-memory", "160MiB"))
    before = server.rss()
    with RawClient(server.port) as stranger:  # unauthenticated: refused before a byte of payload is read
        stranger.send(frame({"op": "put", "id": 1, "sum": 0, "rid": 1}, MAX_PAYLOAD))
        assert stranger.receive()[0]["err"] == "auth" and stranger.hung_up()
    with RawClient(server.port, server.secret) as liar:  # larger than any block: refused at once
        announce_put(liar, 2, MAX_PAYLOAD)
        answer, _ = liar.receive()
        assert answer["err"] == "limit" and "larger than this server takes" in answer["msg"]
        assert server.rss() < before + 64 * MiB
        still_serving(server)
    with RawClient(server.port, server.secret) as liar:  # its payload is read past, not kept
        announce_put(liar, 3, 64 * MiB + 1)
        assert liar.receive()[0]["err"] == "limit"
        liar.send(bytes(64 * MiB + 1))
        assert liar.request({"op": "stat", "rid": 4})[0]["stat"]["blocks"] >= 0  # and the connection goes on
        assert server.rss() < before + 64 * MiB
    slow = [RawClient(server.port, server.secret, timeout=30) for _ in range(2)]
    try:  # within the limits, but sending only the first bytes: memory backs only what arrived
        data = content(9, 60 * MiB)
        for i, raw in enumerate(slow):
            raw.send(raw.signed({"op": "put", "id": 9 + i, "sum": checksum(data), "rid": 1}, len(data)) + data[:4096])
        time.sleep(0.5)
        assert server.rss() < before + 64 * MiB
        still_serving(server)
        slow[0].send(data[4096:])
        assert slow[0].receive()[0] == {"rid": 1}
    finally:
        for raw in slow:
            raw.close()
    conn = connect(server)
    assert conn.read(9) == data
    conn.close()
    still_serving(server)


def test_puts_wait_for_request_memory_and_one_that_could_never_fit_is_refused(flash_servers):
    (server,) = flash_servers(1, options=("--max-request-memory", "9MiB", "--max-block-size", "16MiB"))
    conn = connect(server, streams=4)
    errors: list[str] = []

    def writer(first: int) -> None:
        try:
            for block_id in range(first, first + 3):
                conn.write(block_id, content(block_id, 4 * MiB))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(repr(e))

    threads = [threading.Thread(target=writer, args=(10 * i,)) for i in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and not any(t.is_alive() for t in threads)
    for block_id in (10, 31, 62):
        assert conn.read(block_id) == content(block_id, 4 * MiB)
    with pytest.raises(RemoteError) as refused:
        conn.write(99, content(99, 10 * MiB))
    assert refused.value.code == "limit" and "--max-request-memory" in str(refused.value)
    with pytest.raises(RemoteError) as refused:
        conn.write(98, content(98, 17 * MiB))
    assert refused.value.code == "limit" and "--max-block-size" in str(refused.value)
    conn.close()
    still_serving(server)


def test_a_client_that_never_reads_its_answers_is_closed_and_frees_its_memory(flash_servers):
    (server,) = flash_servers(1, options=("--max-request-memory", "16MiB", "--idle-timeout", "1"))
    conn = connect(server)
    conn.write(8, content(8, 4 * MiB))
    with RawClient(server.port, server.secret) as hog:
        hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.send(b"".join(hog.signed({"op": "get", "id": 8, "rid": i}) for i in range(50)))
        time.sleep(0.5)  # its answers fill the socket and hold the server's request memory
        assert conn.read(8, timeout=10) == content(8, 4 * MiB)  # served once the hog is cut off
        wait_for(lambda: "closed: nothing sent or received for 1s" in server.log.read_text(), 10, "the hog is cut off")
    conn.close()
    still_serving(server)


def test_failed_allocations_end_a_request_or_a_connection_never_the_server(flash_servers):
    """Out of memory (here: out of address space) while serving one client, the others go on."""
    (server,) = flash_servers(1, capacity="1GiB", options=("--max-request-memory", "4GiB",
                                                           "--max-block-size", "1GiB"))
    conn = connect(server)
    big = content(6, 160 * MiB)
    conn.write(6, big)
    still_serving(server)
    status = (Path("/proc") / str(server.proc.pid) / "status").read_text()
    vm = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmSize:"))) << 10
    subprocess.run(["prlimit", f"--pid={server.proc.pid}", f"--as={vm + 96 * MiB}"], check=True, timeout=10)
    with RawClient(server.port, server.secret) as greedy:  # its payload cannot even be mapped
        announce_put(greedy, 5, 900 * MiB)
        assert greedy.hung_up()
    with pytest.raises(RemoteError, match="MemoryError"):  # reading the block back cannot allocate it
        conn.read(6)
    still_serving(server)
    conn.close()


# -- fuzzing ----------------------------------------------------------------------------------

ODD_VALUES = [None, True, -1, -(1 << 63), (1 << 64) - 1, 3.5, float("nan"), "7", b"\x00" * 9, [1], {"a": 1}]
FIELDS = ["op", "id", "off", "len", "sum", "pin", "qp", "rid"]
OPS = ["get", "put", "del", "has", "stat", "unpin", "qp", "locate", "launch", "", 5]


def fuzz_header(rng: random.Random) -> dict:
    header = {"op": rng.choice(OPS), "id": rng.randrange(1000, 2000), "rid": rng.randrange(100)}
    for name in rng.sample(FIELDS, rng.randint(1, 4)):
        header[name] = rng.choice(ODD_VALUES)
    return header


def fuzz_once(server, rng: random.Random) -> None:
    """One hostile connection. What must be refused is hung up on; what is answered is answered
    properly; noise the server cannot tell from a frame still arriving is simply left behind."""
    case = rng.randrange(7)
    with RawClient(server.port, server.secret if case >= 2 else None, timeout=5) as raw:
        if case == 0:  # noise instead of a handshake
            raw.send(rng.randbytes(rng.randint(1, 300)))
        elif case == 1:  # a frame prefix announcing more than any limit
            raw.send(PREFIX.pack(rng.choice([1 << 20, 1 << 31, (1 << 32) - 1]), rng.choice([0, 1 << 62])))
            assert raw.hung_up()
        elif case == 2:  # noise after authenticating
            raw.send(rng.randbytes(rng.randint(1, 300)))
        elif case == 3:  # signed requests with fields of wrong types or out of range
            for _ in range(rng.randint(1, 5)):
                answer, _ = raw.request(fuzz_header(rng))
                assert "err" in answer or answer.keys() <= {"rid", "has", "stat", "size", "sum"}, answer
        elif case == 4:  # a signed header that is not a map, or not msgpack
            body = rng.choice([msgpack.packb([1, 2]), msgpack.packb("x"), b"\xc1", msgpack.packb({"a": 1})[:-1]])
            raw.send(raw.macs.seal(PREFIX.pack(len(body), 0) + body))
            assert raw.hung_up()
        elif case == 5:  # a truncated signed frame, then gone
            signed = raw.signed({"op": "put", "id": 1500, "sum": 1, "rid": 1}, 1000)
            raw.send((signed + b"x" * 1000)[:rng.randint(1, len(signed) + 999)])
        else:  # huge lengths in signed requests: refused or answered, never allocated
            header = {"op": rng.choice(["get", "put", "has"]), "id": 1501, "sum": 0, "rid": 1,
                      "off": rng.choice([0, 1 << 63]), "len": rng.choice([-1, 1 << 62])}
            raw.send(raw.signed(header, rng.choice([0, MAX_PAYLOAD])))
            assert raw.receive()[0]["rid"] == 1


def test_fuzzed_input_never_stops_the_server(flash_servers):
    (server,) = flash_servers(1)
    good = connect(server)
    for block_id in range(1, 6):
        good.write(block_id, content(block_id, 10_000))
    rng = random.Random(20240611)
    for i in range(300):
        fuzz_once(server, rng)
        if i % 25 == 0:
            still_serving(server)
    for block_id in range(1, 6):
        assert good.read(block_id) == content(block_id, 10_000)
    good.close()
    still_serving(server)
    log = server.log.read_text()
    assert "Traceback" not in log, log[-3000:]


# -- descriptors, connections, idle time -----------------------------------------------------------


def open_files(server) -> int:
    """Descriptors the server process has open (0 once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{server.proc.pid}/fd"))
    except FileNotFoundError:
        return 0


def test_running_out_of_descriptors_does_not_stop_the_server(flash_servers):
    limit = 40
    (server,) = flash_servers(1, limit_files=limit, options=("--max-connections", "1000"))
    still_serving(server)
    hogs = []
    try:
        for _ in range(60):  # more than the server may open; the rest wait in its listen queue
            hogs.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        wait_for(lambda: open_files(server) in (0, limit), 10, "the server has no descriptor left")
        time.sleep(0.5)  # its accepts fail meanwhile
        assert server.proc.poll() is None, server.log.read_text()
    finally:
        for hog in hogs:
            hog.close()
    wait_for(lambda: open_files(server) < limit - 10, 20, "the server closed the connections")
    still_serving(server)
    log = server.log.read_text()
    assert "accepting a connection failed ([Errno 24] Too many open files)" in log
    assert "accepting connections again" in log


def test_connections_beyond_the_cap_are_told_the_server_is_busy(flash_servers):
    (server,) = flash_servers(1, options=("--max-connections", "4"))
    held = [RawClient(server.port, server.secret) for _ in range(4)]
    try:
        with pytest.raises(TransportError, match="is busy.*at most 4 connections"):
            connect(server).stat()
    finally:
        held.pop().close()
    wait_for(lambda: _answers(server), 10, "a place is free again")
    for raw in held:
        raw.close()
    wait_for(lambda: _answers(server), 10, "the places are free again")
    still_serving(server)


def _answers(server) -> bool:
    conn = connect(server)
    try:
        conn.stat()
        return True
    except TransportError:
        return False
    finally:
        conn.close()


def test_idle_connections_are_closed_and_clients_reconnect(flash_servers):
    (server,) = flash_servers(1, options=("--idle-timeout", "0.5"))
    with RawClient(server.port) as silent:  # never authenticates
        assert silent.hung_up()
    with RawClient(server.port, server.secret) as quiet:  # authenticated, then nothing
        assert quiet.request({"op": "stat", "rid": 1})[0]["stat"]
        assert quiet.hung_up()
    conn = connect(server)
    conn.write(4, content(4, 100_000))

    async def reads_after_idle_closes() -> None:
        reader = LoopTcpReader(Address.parse(server.address), server.secret)
        try:
            await reader.open(2, 5.0)
            await trio.sleep(1.5)  # the server closes both idle sockets meanwhile
            assert await loop_read(reader, 4, 10, 1000) == content(4, 100_000)[10:1010]
        finally:
            reader.close()

    time.sleep(1.5)  # the threaded client's socket is closed too, and it connects afresh
    assert conn.read(4) == content(4, 100_000)
    trio.run(reads_after_idle_closes)
    conn.close()
    still_serving(server)


def test_limits_are_checked():
    with pytest.raises(ValueError):
        ServerLimits(max_block=0)
    with pytest.raises(ValueError):
        ServerLimits(idle_timeout=float("inf"))
