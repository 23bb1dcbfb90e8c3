"""RedisKV against real redis-server processes: MemoryKV's semantics on random operations,
conflicts and counters between clients, the commit script's atomicity, commits whose reply
was lost, restarts, replicas and WAIT, a Sentinel failover, pushes, and clear errors."""

from __future__ import annotations

import errno
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aifs.meta import keys
from aifs.meta.kv import Batch, Conflict
from aifs.meta.memory_kv import MemoryKV
from aifs.meta.redis_kv import PAGE, PROBE_EVERY_S, RedisKV
from aifs.meta.redis_url import MetaEngineError
from aifs.meta.writestate import MetaUnavailable, MetaWriteFailed
from redisserver import (RedisServer, SentinelServer, free_port, make_certificates, running, start_replica,
                         start_tls_server, wait_until)

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 20.0  # bound on anything expected to happen soon (a push, a failover step)
KEY = keys.inode(7)


@pytest.fixture
def own_server(tmp_path) -> Iterator[RedisServer]:
    """A server of the test's own, for tests that stop or restart it."""
    with running(tmp_path / "redis") as private:
        yield private


@pytest.fixture
def clients(server):
    """Connect RedisKV clients to the shared server, emptied first; all closed at teardown."""
    server.flush()
    opened: list[RedisKV] = []

    def connect(url: str | None = None, **tuning) -> RedisKV:
        opened.append(RedisKV.connect(url or server.url, **tuning))
        return opened[-1]

    yield connect
    for kv in opened:
        kv.close()


def put(kv, key: bytes, value: bytes | None) -> None:
    """Commit one put (None: one delete)."""
    batch = Batch()
    stage(batch, key, value)
    kv.commit(batch)


def stage(batch: Batch, key: bytes, value: bytes | None) -> None:
    if value is None:
        batch.delete(key)
    else:
        batch.put(key, value)


class Heard:
    """A listener that records what it hears and can wait for it."""

    def __init__(self) -> None:
        self.pushes: list[list[bytes] | None] = []
        self._cond = threading.Condition()

    def __call__(self, changed: list[bytes] | None) -> None:
        with self._cond:
            self.pushes.append(changed)
            self._cond.notify_all()

    def wait_for(self, wanted, timeout: float = WAIT_S) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: wanted in self.pushes, timeout), \
                f"{wanted!r} not heard within {timeout}s; heard {self.pushes!r}"

    def forget(self) -> None:
        with self._cond:
            self.pushes.clear()


# -- the same results as MemoryKV -------------------------------------------------------------

TAGS = [keys.DENTRY, keys.INODE, keys.COUNTER, keys.UPLOAD]
key_st = st.builds(lambda tag, rest: tag + rest, st.sampled_from(TAGS),
                   st.binary(max_size=3) | st.sampled_from([b"\xff", b"\xff\xff", b"\x00", b"a\xff"]))
prefix_st = st.sampled_from(TAGS) | key_st
counter_st = st.sampled_from([keys.counter(b"a"), keys.counter(b"b")])
delta_st = st.integers(-(2**40), 2**40)
op_st = st.one_of(
    st.tuples(st.just("commit"), st.dictionaries(key_st, st.none() | st.binary(max_size=4), max_size=4),
              st.lists(st.tuples(key_st, st.booleans()), max_size=3), st.lists(prefix_st, max_size=2),
              st.dictionaries(counter_st, delta_st, max_size=2)),
    st.tuples(st.just("scan"), prefix_st, st.none() | key_st),
    st.tuples(st.just("get"), key_st),
    st.tuples(st.just("multi_get"), st.lists(key_st, max_size=4)),
    st.tuples(st.just("counter"), counter_st),
    st.tuples(st.just("add"), counter_st, delta_st),
)


def run(kv, op, reference: MemoryKV):
    """Apply `op` to `kv`; what it answered. Reads a commit expects are the reference's
    current values (True) or a value no key holds (False)."""
    kind, *args = op
    if kind == "commit":
        ops, reads, empty, increments = args
        batch = Batch()
        for key, value in ops.items():
            stage(batch, key, value)
        for key, current in reads:
            batch.expect(key, reference.get(key) if current else b"never held")
        for prefix in empty:
            batch.expect_empty(prefix)
        for key, delta in increments.items():
            batch.add(key, delta)
        try:
            kv.commit(batch)
        except Conflict:
            return "conflict"
        return "committed"
    if kind == "scan":
        return list(kv.scan(*args))
    return getattr(kv, kind)(*args)


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_st, max_size=30))
def test_random_operations_answer_as_memory_kv_does(server, ops):
    server.flush()
    kv = RedisKV.connect(server.url)
    reference = MemoryKV()
    try:
        for op in ops:
            got = run(kv, op, reference)  # first: a commit's expected reads come from the reference
            assert got == run(reference, op, reference), op
        everything = [item for tag in TAGS for item in reference.scan(tag)]
        assert [item for tag in TAGS for item in kv.scan(tag)] == everything
    finally:
        kv.close()


def test_a_scan_across_pages_sees_changes_ahead_of_it_as_memory_kv_does(clients):
    """Binary names across several pages; keys added or removed ahead of the scan while it
    runs are seen or missed exactly as MemoryKV's scan sees them."""
    kv, reference = clients(), MemoryKV()
    names = [bytes([a, b]) for a in (0x00, 0x7F, 0xFF) for b in range(256)]
    for store in (kv, reference):
        batch = Batch()
        for name in names:
            batch.put(keys.dentry(9, name), name)
        batch.put(keys.dentry(10, b""), b"next directory")
        store.commit(batch)
    assert len(names) > 2 * PAGE

    def scan_while_changing(store) -> list[bytes]:
        seen = []
        for step, (key, _) in enumerate(store.scan(keys.dentry_prefix(9))):
            seen.append(key)
            if step == PAGE // 2:
                put(store, keys.dentry(9, b"\xff\xff\xff"), b"added ahead")
                put(store, keys.dentry(9, bytes([0xFF, 254])), None)
        return seen

    assert scan_while_changing(kv) == scan_while_changing(reference)
    tail = keys.dentry(9, b"\xff")
    assert list(kv.scan(tail)) == list(reference.scan(tail))
    assert list(kv.scan(keys.dentry_prefix(9), keys.dentry(9, b"\x7f\x80"))) == \
        list(reference.scan(keys.dentry_prefix(9), keys.dentry(9, b"\x7f\x80")))


def test_keys_of_the_engines_own_namespace_are_refused(clients):
    kv = clients()
    for key in (b"", b"\x00idx:D"):
        batch = Batch()
        batch.put(key, b"x")
        with pytest.raises(ValueError, match="tag byte"):
            kv.commit(batch)
    assert list(kv.scan(keys.DENTRY)) == []


# -- between clients ----------------------------------------------------------------------------


def test_a_read_changed_by_another_client_is_a_conflict(clients):
    first, second = clients(), clients()
    put(first, KEY, b"v1")
    batch = Batch()
    batch.expect(KEY, first.get(KEY))
    batch.put(keys.inode(8), b"based on v1")
    put(second, KEY, b"v2")
    with pytest.raises(Conflict):
        first.commit(batch)
    assert first.get(keys.inode(8)) is None


def test_a_range_filled_by_another_client_is_a_conflict(clients):
    first, second = clients(), clients()
    batch = Batch()
    assert list(first.scan(keys.dentry_prefix(5))) == []
    batch.expect_empty(keys.dentry_prefix(5))
    batch.delete(keys.inode(5))
    put(second, keys.dentry(5, b"late"), keys.u64(9))
    with pytest.raises(Conflict):
        first.commit(batch)


def test_counters_moved_by_two_clients_at_once_add_up(clients):
    counter = keys.counter(b"next_ino")
    rounds = 200

    def adder(kv) -> list[int]:
        seen = []
        for _ in range(rounds):
            seen.append(kv.add(counter, 1))
            batch = Batch()
            batch.add(counter, 2)
            kv.commit(batch)
        return seen

    first, second = clients(), clients()
    results: list[list[int]] = [[], []]
    threads = [threading.Thread(target=lambda i=i, kv=kv: results.__setitem__(i, adder(kv)))
               for i, kv in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S * 3)
    assert not any(thread.is_alive() for thread in threads)
    assert len(results[0]) == len(results[1]) == rounds
    assert not set(results[0]) & set(results[1]), "two clients were handed the same value"
    assert first.counter(counter) == 2 * rounds * 3


# -- the commit script ------------------------------------------------------------------------


def test_a_failed_check_changes_nothing_and_publishes_nothing(clients):
    kv = clients()
    heard = Heard()
    kv.subscribe(heard)
    setup = Batch()
    setup.put(KEY, b"v1")
    setup.put(keys.dentry(1, b"old"), keys.u64(7))
    setup.add(keys.counter(b"usage.inodes"), 1)
    kv.commit(setup)
    before = {tag: list(kv.scan(tag)) for tag in TAGS}

    batch = Batch()
    batch.put(keys.dentry(1, b"new"), keys.u64(8))
    batch.delete(keys.dentry(1, b"old"))
    batch.put(keys.inode(8), b"new inode")
    batch.add(keys.counter(b"usage.inodes"), 1)
    batch.expect(keys.inode(1), None)
    batch.expect(KEY, b"not what it holds")  # checked last of the reads, after others held
    with pytest.raises(Conflict):
        kv.commit(batch)

    assert {tag: list(kv.scan(tag)) for tag in TAGS} == before
    assert kv.counter(keys.counter(b"usage.inodes")) == 1
    put(kv, keys.inode(99), b"marker")
    heard.wait_for([keys.inode(99)])
    assert heard.pushes == [[KEY, keys.dentry(1, b"old")], [keys.inode(99)]]


class ReplyDropper:
    """A TCP relay to a server that can lose one reply: the next request holding `marker`
    reaches the server and is carried out, then the connection breaks before the answer
    gets back, as when a server or the network fails at that instant."""

    def __init__(self, server_port: int) -> None:
        self._server_port = server_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._marker: bytes | None = None
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_reply_to(self, marker: bytes) -> None:
        self.dropped.clear()
        self._marker = marker

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._server_port))
            lose = threading.Event()
            threading.Thread(target=self._requests, args=(client, upstream, lose), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client, lose), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, lose: threading.Event) -> None:
        try:
            while data := client.recv(1 << 16):
                if self._marker is not None and self._marker in data:
                    self._marker = None
                    lose.set()
                upstream.sendall(data)
        except OSError:
            pass
        _close(client, upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket, lose: threading.Event) -> None:
        try:
            while data := upstream.recv(1 << 16):
                if lose.is_set():
                    self.dropped.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client, upstream)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


@pytest.fixture
def dropper(server):
    relay = ReplyDropper(server.port)
    yield relay
    relay.close()


def test_a_commit_whose_reply_was_lost_is_applied_once(clients, dropper):
    """The retry finds the lost attempt's outcome: the batch is neither applied twice nor
    reported as conflicting with its own change."""
    kv = clients(f"redis://127.0.0.1:{dropper.port}/0")
    put(kv, KEY, b"v1")  # the commit script is loaded before the reply to lose
    batch = Batch()
    batch.expect(KEY, b"v1")
    batch.put(KEY, b"v2")
    batch.add(keys.counter(b"usage.inodes"), 1)
    ran = []
    batch.on_commit(lambda: ran.append(True))
    dropper.drop_reply_to(b"EVALSHA")
    kv.commit(batch)
    assert dropper.dropped.is_set(), "the relay lost no reply"
    assert ran == [True]
    assert kv.get(KEY) == b"v2"
    assert kv.counter(keys.counter(b"usage.inodes")) == 1


def test_an_add_whose_reply_was_lost_moves_the_counter_once(clients, dropper):
    kv = clients(f"redis://127.0.0.1:{dropper.port}/0")
    counter = keys.counter(b"next_block")
    assert kv.add(counter, 4096) == 4096
    dropper.drop_reply_to(b"EVALSHA")
    assert kv.add(counter, 4096) == 8192
    assert dropper.dropped.is_set()
    assert kv.counter(counter) == 8192


def test_a_conflict_whose_reply_was_lost_stays_a_conflict(clients, dropper):
    kv, other = clients(f"redis://127.0.0.1:{dropper.port}/0"), clients()
    put(kv, KEY, b"v1")
    batch = Batch()
    batch.expect(KEY, b"v1")
    batch.put(keys.inode(8), b"based on v1")
    put(other, KEY, b"v2")
    dropper.drop_reply_to(b"EVALSHA")
    with pytest.raises(Conflict):
        kv.commit(batch)
    assert dropper.dropped.is_set()
    assert kv.get(keys.inode(8)) is None


# -- restarts and lost servers ----------------------------------------------------------------


def test_committed_data_survives_a_restart_and_clients_carry_on(own_server):
    kv = RedisKV.connect(own_server.url, retry_window=WAIT_S)
    try:
        batch = Batch()
        batch.put(KEY, b"acknowledged")
        batch.put(keys.dentry(1, b"name"), keys.u64(7))
        batch.add(keys.counter(b"usage.inodes"), 5)
        kv.commit(batch)
        own_server.kill()
        restarter = threading.Timer(1.0, own_server.start)
        restarter.start()
        put(kv, keys.inode(8), b"committed while the server came back")  # waits for it
        restarter.join()
        assert kv.get(KEY) == b"acknowledged"
        assert list(kv.scan(keys.dentry_prefix(1))) == [(keys.dentry(1, b"name"), keys.u64(7))]
        own_server.kill()
        own_server.start()
        fresh = RedisKV.connect(own_server.url)
        assert fresh.multi_get([KEY, keys.inode(8)]) == [b"acknowledged", b"committed while the server came back"]
        assert fresh.counter(keys.counter(b"usage.inodes")) == 5
        fresh.close()
    finally:
        kv.close()


def test_a_server_lost_for_longer_than_the_window_fails_calls_until_it_answers(own_server):
    kv = RedisKV.connect(own_server.url, retry_window=0.5)
    try:
        own_server.kill()
        with pytest.raises(MetaUnavailable) as failed:
            put(kv, KEY, b"x")
        assert failed.value.errno == errno.EIO
        assert f"127.0.0.1:{own_server.port}" in kv.write_failure
        with pytest.raises(MetaUnavailable) as read_failed:  # callers keep their work and retry
            kv.get(KEY)
        assert read_failed.value.errno == errno.EIO
        assert not kv.writable()
        own_server.start()
        wait_until(kv.writable, "the store to find its server again", PROBE_EVERY_S + WAIT_S)
        assert kv.write_failure is None
        put(kv, KEY, b"after")
        assert kv.get(KEY) == b"after"
    finally:
        kv.close()


def test_a_read_only_store_refuses_changes(clients):
    writer = clients()
    put(writer, KEY, b"v")
    kv = clients(read_only=True)
    assert kv.get(KEY) == b"v"
    for change in (lambda: put(kv, KEY, b"w"), lambda: kv.add(keys.counter(b"n"), 1), kv.check_writable):
        with pytest.raises(MetaWriteFailed) as failed:
            change()
        assert failed.value.errno == errno.EROFS
    assert writer.get(KEY) == b"v"


# -- durability ---------------------------------------------------------------------------------


def test_sync_waits_until_a_replica_holds_the_changes(own_server, tmp_path):
    replica = start_replica(tmp_path / "replica", own_server)
    kv = RedisKV.connect(own_server.url, replica_wait=WAIT_S)
    hasty = RedisKV.connect(own_server.url, replica_wait=1.0)
    try:
        put(kv, KEY, b"replicated")
        kv.sync()
        on_replica = RedisKV.connect(replica.url, read_only=True)
        assert on_replica.get(KEY) == b"replicated"
        on_replica.close()
        replica.pause()
        put(kv, KEY, b"not confirmed")
        with pytest.raises(MetaWriteFailed, match="no replica") as failed:
            hasty.sync()
        assert failed.value.errno == errno.EIO
        with pytest.raises(MetaWriteFailed, match="no replica"):
            hasty.close()  # reports it too, and lets go of the server all the same
        replica.resume()
        kv.sync()
    finally:
        replica.resume()
        kv.close()
        replica.kill()


def durability_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "fsync() is not durable" in r.getMessage()]


def test_a_sync_after_the_server_lost_acknowledged_writes_fails_once(clients, server):
    """What a failover to a replica that never received some writes looks like to a client: the
    server no longer holds its latest writes. The next sync says so (EIO), once."""
    kv = clients()
    put(kv, KEY, b"acknowledged")
    put(kv, keys.dentry(1, b"also"), keys.u64(3))
    with redis.Redis(port=server.port) as admin:
        for mark in admin.keys(b"\x00mark:*"):
            admin.decr(mark)  # the last write never reached this server
    with pytest.raises(MetaWriteFailed, match="lost changes"):
        kv.sync()
    kv.sync()
    put(kv, KEY, b"after")
    kv.sync()


def test_a_lost_write_seen_by_a_later_commit_fails_the_next_sync(clients, server):
    kv = clients()
    put(kv, KEY, b"first")
    with redis.Redis(port=server.port) as admin:
        for mark in admin.keys(b"\x00mark:*"):
            admin.decr(mark)
    put(kv, KEY, b"second")  # the server holds this one, not the one before it
    with pytest.raises(MetaWriteFailed, match="lost changes"):
        kv.sync()
    kv.sync()


def test_a_server_without_fsync_on_every_write_is_warned_about_once(tmp_path, caplog):
    relaxed = RedisServer(tmp_path / "relaxed", None, "--appendfsync", "everysec")
    relaxed.start()
    try:
        with caplog.at_level(logging.WARNING, logger="aifs.meta.redis_kv"):
            RedisKV.connect(relaxed.url).close()
        warnings = durability_warnings(caplog)
        assert len(warnings) == 1 and "appendfsync everysec" in warnings[0], warnings
        assert "\n" not in warnings[0]
    finally:
        relaxed.kill()


def test_a_server_with_fsync_on_every_write_draws_no_warning(clients, caplog):
    with caplog.at_level(logging.WARNING, logger="aifs.meta.redis_kv"):
        clients()
    assert durability_warnings(caplog) == []


def test_clients_follow_a_sentinel_failover(own_server, tmp_path):
    replica = start_replica(tmp_path / "replica", own_server)
    sentinel = SentinelServer(tmp_path / "sentinel", own_server)
    sentinel.start()
    kv = None
    try:
        wait_until(lambda: sentinel.replicas_known() == 1, "the sentinel to learn of the replica")
        kv = RedisKV.connect(sentinel.url(), retry_window=60.0)
        heard = Heard()
        kv.subscribe(heard)
        put(kv, KEY, b"before")
        kv.sync()  # on the replica too, so the failover keeps it
        own_server.kill()
        put(kv, keys.inode(8), b"after")  # waits for the failover
        assert sentinel.primary_port() == replica.port
        assert kv.multi_get([KEY, keys.inode(8)]) == [b"before", b"after"]
        heard.wait_for(None)
        put(kv, keys.inode(9), b"heard")
        heard.wait_for([keys.inode(9)])
    finally:
        if kv is not None:
            kv.close()
        sentinel.kill()
        replica.kill()


# -- pushes -------------------------------------------------------------------------------------


def test_every_commit_is_pushed_to_every_client(clients):
    first, second = clients(), clients()
    heard_first, heard_second = Heard(), Heard()
    first.subscribe(heard_first)
    second.subscribe(heard_second)
    batch = Batch()
    batch.put(KEY, b"v")
    batch.delete(keys.dentry(1, b"gone"))
    batch.add(keys.counter(b"usage.inodes"), 1)  # counters are not pushed
    first.commit(batch)
    for heard in (heard_first, heard_second):
        heard.wait_for([KEY, keys.dentry(1, b"gone")])


def test_a_listener_of_other_clients_does_not_hear_its_own_client(clients):
    first, second = clients(), clients()
    everything, others = Heard(), Heard()
    first.subscribe(everything)
    first.subscribe(others, from_others=True)
    put(first, KEY, b"own")
    put(second, keys.dentry(1, b"theirs"), keys.u64(9))
    everything.wait_for([KEY])
    everything.wait_for([keys.dentry(1, b"theirs")])
    others.wait_for([keys.dentry(1, b"theirs")])
    assert [KEY] not in others.pushes


def test_a_lost_subscription_is_announced_with_none_once_back(clients, server):
    kv = clients()
    heard = Heard()
    kv.subscribe(heard)
    with redis.Redis(port=server.port) as admin:
        assert admin.client_kill_filter(_type="pubsub") >= 1
    heard.wait_for(None)
    put(clients(), KEY, b"after")
    heard.wait_for([KEY])


# -- clear errors -----------------------------------------------------------------------------


def one_line_error(url: str) -> str:
    with pytest.raises(MetaEngineError) as failed:
        RedisKV.connect(url)
    message = str(failed.value)
    assert "\n" not in message and message
    return message


def test_an_unreachable_server_is_one_clear_line():
    port = free_port()
    message = one_line_error(f"redis://127.0.0.1:{port}/0")
    assert message.startswith(f"cannot reach the metadata server redis://127.0.0.1:{port}/0")


def test_a_wrong_or_missing_password_is_one_clear_line(tmp_path):
    guarded = RedisServer(tmp_path / "guarded", None, "--requirepass", "right-secret")
    guarded.start()
    try:
        for userinfo in (":wrong-secret@", "", "someone:wrong-secret@"):
            message = one_line_error(f"redis://{userinfo}127.0.0.1:{guarded.port}/0")
            assert "refused the credentials" in message and "secret" not in message
        RedisKV.connect(f"redis://:right-secret@127.0.0.1:{guarded.port}/0").close()
    finally:
        guarded.kill()


@pytest.mark.parametrize("url, problem", [
    ("redis://", "names no host"),
    ("redis://:topsecret@host:port/0", "Port could not be cast"),
    ("redis://host/zero", "database 'zero' is not a number"),
    ("redis://host/0?ssl_ca_certs=/ca.pem", "TLS options need rediss://"),
    ("rediss://host/0?ssl_cert_reqs=maybe", "ssl_cert_reqs is one of"),
    ("rediss://host/0?colour=blue", "unknown option 'colour'"),
    ("redis+sentinel:///aifs/0", "names no sentinel"),
    ("redis+sentinel://host:26379/", "names no master"),
    ("memcached://host", "scheme"),
])
def test_a_malformed_url_is_one_clear_line(url, problem):
    message = one_line_error(url)
    assert problem in message and "topsecret" not in message


def test_aifs_mount_reports_an_engine_it_cannot_use_in_one_line(tmp_path):
    guarded = RedisServer(tmp_path / "guarded", None, "--requirepass", "right-secret")
    guarded.start()
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    config = tmp_path / "aifs.toml"
    try:
        for url, says in [(f"redis://127.0.0.1:{free_port()}/0", "cannot reach the metadata server"),
                          (f"redis://:wrong-secret@127.0.0.1:{guarded.port}/0", "refused the credentials")]:
            config.write_text(f'[volume]\nstate_dir = "{tmp_path / "state"}"\n[meta]\nurl = "{url}"\n'
                              '[[tiers]]\nkind = "nvme"\ncapacity = "64MiB"\n[[tiers]]\nkind = "objstore"\n')
            done = subprocess.run([sys.executable, "-m", "aifs", "mount", "-c", str(config), str(mountpoint)],
                                  cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            lines = done.stderr.strip().splitlines()
            assert done.returncode != 0, done.stderr
            assert says in lines[-1] and "Traceback" not in done.stderr and "wrong-secret" not in done.stderr
    finally:
        guarded.kill()


def test_rediss_takes_redis_pys_tls_options(tmp_path):
    certificates = make_certificates(tmp_path / "tls")
    server, tls_port = start_tls_server(tmp_path / "redis", certificates)
    base = f"rediss://127.0.0.1:{tls_port}/0"
    client = f"ssl_certfile={certificates['client_cert']}&ssl_keyfile={certificates['client_key']}"
    try:
        kv = RedisKV.connect(f"{base}?ssl_ca_certs={certificates['ca']}&{client}")
        put(kv, KEY, b"over TLS")
        kv.close()
        kv = RedisKV.connect(f"{base}?ssl_cert_reqs=none&{client}")
        assert kv.get(KEY) == b"over TLS"
        kv.close()
        assert "certificate verify failed" in one_line_error(f"{base}?{client}")
        assert one_line_error(f"{base}?ssl_ca_certs={certificates['ca']}").startswith("cannot reach")
    finally:
        server.kill()
