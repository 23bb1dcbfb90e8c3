"""The shared metadata engine: one Redis database that every node of a volume uses.

Data model: each KV key is a Redis string under its own bytes. Ordered scans come from one
sorted set per tag byte (all members at score 0, so ZRANGEBYLEX orders them bytewise).
Counters are Redis integers under a prefix of their own, apart from plain values as in every
engine. The engine's own keys start with 0x00, which no tag is.

A commit is one Lua script (redis_commit.lua): it checks the batch's read set and empty
ranges, applies the writes with their index entries and counter increments, and publishes
the changed keys on the volume's channel, all at one instant; or changes nothing.

A lost connection (a restart, a failover) is retried for a while. A commit whose reply was
lost is retried under the same attempt key, which the script records with the outcome, so a
retry never applies a batch twice nor mistakes its own change for a conflict.
"""

import errno
import logging
import os
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from importlib import resources
from typing import TypeVar

import msgpack
import redis
from redis.backoff import NoBackoff
from redis.client import PubSub
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from aifs.meta.kv import Batch, Conflict, Listener, WritableByCheck
from aifs.meta.redis_url import MetaEngineError, RedisTarget, parse_redis_url
from aifs.meta.writestate import MetaUnavailable, MetaWriteFailed

log = logging.getLogger(__name__)

RESERVED = b"\x00"
INDEX = RESERVED + b"idx:"
COUNTER = RESERVED + b"ctr:"
ATTEMPT = RESERVED + b"txn:"
WRITE_MARK = RESERVED + b"mark:"
SYNC_MARK = RESERVED + b"sync"
CONFLICT = b"!"
PAGE = 256  # keys per scan round trip

RETRY_WINDOW_S = 60.0  # how long a lost server is waited for before calls fail with EIO
REPLICA_WAIT_S = 5.0  # how long sync() waits for a replica to confirm
CONNECT_TIMEOUT_S = 5.0
REPLY_SLACK_S = 5.0  # a reply's time beyond the longest wait asked of the server
ATTEMPT_KEPT_S = 60.0  # an attempt's outcome outlives the retry window by this much
PROBE_EVERY_S = 1.0  # while the server is lost, at most one call a second tries it
FIRST_DELAY_S, MAX_DELAY_S = 0.05, 1.0
POLL_S = 0.5  # how often the push thread looks up from its subscription

_LOST = (redis.ConnectionError, redis.TimeoutError)
T = TypeVar("T")


def _script(name: str) -> str:
    return resources.files("aifs.meta").joinpath(name).read_text()


class RedisKV(WritableByCheck):
    """KVStore on a Redis server (or the primary that Sentinel names), shared by every node.

    `retry_window`: seconds a lost server is retried before calls fail (EIO); after that,
    calls fail at once, but for one probe a second, until it answers again.
    `replica_wait`: seconds sync() waits for a replica to confirm the changes."""

    shared = True

    def __init__(self, target: RedisTarget, read_only: bool = False,
                 retry_window: float = RETRY_WINDOW_S, replica_wait: float = REPLICA_WAIT_S) -> None:
        self._target = target
        self._read_only = read_only
        self._replica_wait = replica_wait
        self._redis = target.client(
            socket_timeout=replica_wait + REPLY_SLACK_S, socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_keepalive=True, retry=Retry(NoBackoff(), 0), protocol=2, client_name="aifs-meta")
        self._link = ServerLink(target.shown, retry_window)
        self._commit_script = self._redis.register_script(_script("redis_commit.lua"))
        self._scan_script = self._redis.register_script(_script("redis_scan.lua"))
        origin = secrets.token_bytes(8)
        self._mark = WRITE_MARK + origin
        self._writes = 0  # writes this client made and the server acknowledged, as its mark should say
        self._lost_writes = False  # the server lost writes this client made; the next sync says so
        self._layout = [int((retry_window + ATTEMPT_KEPT_S) * 1000), INDEX, COUNTER, target.channel, origin,
                        self._mark]
        self._pushes = Pushes(self._redis, target.channel, target.shown, origin)

    @classmethod
    def connect(cls, url: str, read_only: bool = False, retry_window: float = RETRY_WINDOW_S,
                replica_wait: float = REPLICA_WAIT_S) -> "RedisKV":
        """The engine `url` names, once its server answered; MetaEngineError (one line) when
        the URL is wrong, the server cannot be reached or refuses the credentials."""
        kv = cls(parse_redis_url(url), read_only, retry_window, replica_wait)
        try:
            kv._greet()
        except MetaEngineError:
            kv._redis.close()
            raise
        return kv

    def _greet(self) -> None:
        shown = self._target.shown
        try:
            self._redis.ping()
            self._warn_unless_durable()
        except redis.AuthenticationError as e:
            raise MetaEngineError(f"the metadata server {shown} refused the credentials ({e}); "
                                  "check the user and password in [meta] url") from None
        except MasterNotFoundError as e:
            raise MetaEngineError(f"no sentinel of {shown} names a reachable primary ({e}); check the "
                                  "master name in [meta] url and that its primary is up") from None
        except _LOST as e:
            raise MetaEngineError(f"cannot reach the metadata server {shown} ({e}); check [meta] url "
                                  "and that the server is running") from None
        except redis.ResponseError as e:
            raise MetaEngineError(f"the metadata server {shown} refused the connection ({e}); "
                                  "check [meta] url") from None

    def _warn_unless_durable(self) -> None:
        try:
            config = self._redis.config_get("append*")
        except redis.ResponseError:  # CONFIG renamed away or not permitted: nothing to learn
            return
        if (config.get("appendonly"), config.get("appendfsync")) != ("yes", "always"):
            log.warning("metadata server %s runs with appendonly %s and appendfsync %s: fsync() is not "
                        "durable unless it runs with appendonly yes and appendfsync always",
                        self._target.shown, config.get("appendonly"), config.get("appendfsync"))

    # -- reads -------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        return self._link.call(lambda: self._redis.get(key))

    get_fresh = get

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        return self._link.call(lambda: self._redis.mget(keys))

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Keys starting with `prefix` in byte order, from `start` (inclusive) when given; a
        page at a time, each page as it was at one instant."""
        _check_key(prefix)
        index = [INDEX + prefix[:1]]
        low = b"[" + (prefix if start is None else max(start, prefix))
        high = _past(prefix)
        while True:
            page = partial(self._scan_script, keys=index, args=[low, high, PAGE])
            keys, values = self._link.call(page)
            yield from zip(keys, values)
            if len(keys) < PAGE:
                return
            low = b"(" + keys[-1]

    def counter(self, key: bytes) -> int:
        value = self._link.call(lambda: self._redis.get(COUNTER + key))
        return 0 if value is None else int(value)

    # -- writes ------------------------------------------------------------

    def commit(self, batch: Batch) -> None:
        if batch.ops or batch.increments or batch.reads or batch.empty:
            self._apply(batch)
        batch.committed()

    def add(self, key: bytes, delta: int) -> int:
        batch = Batch()
        batch.add(key, delta)
        return self._apply(batch)[0]

    def _apply(self, batch: Batch) -> list[int]:
        """Run the commit script on `batch`: the counters' new totals, or Conflict. Every retry
        of this one commit carries the same attempt key."""
        writes = bool(batch.ops or batch.increments)
        if writes:
            self.check_writable()
        number = self._writes + 1
        args = [_encode(batch), ATTEMPT + secrets.token_bytes(16), *self._layout, number]
        try:
            outcome = self._link.call(lambda: self._commit_script(args=args))
        except redis.ResponseError as e:
            raise self._refused(e) from None
        if outcome == CONFLICT:
            raise Conflict()
        totals, lost = msgpack.unpackb(outcome, raw=True)
        if writes:
            self._writes = number
            self._lost_writes = self._lost_writes or bool(lost)
        return [int(total) for total in totals]

    def _refused(self, error: redis.ResponseError) -> MetaWriteFailed:
        """The server answered, but would not take the change (out of memory, its disk)."""
        full = isinstance(error, redis.exceptions.OutOfMemoryError) or os.strerror(errno.ENOSPC) in str(error)
        return MetaWriteFailed(errno.ENOSPC if full else errno.EIO,
                               f"the metadata server {self._target.shown} refused a change: {error}")

    @property
    def write_failure(self) -> str | None:
        """None while the server answers; otherwise why the metadata is unavailable, in one line."""
        return self._link.failure

    def check_writable(self) -> None:
        if self._read_only:
            raise MetaWriteFailed(errno.EROFS, f"the metadata on {self._target.shown} is open read-only")
        if self._link.failure is not None:
            self._link.call(self._redis.ping)


    def sync(self) -> None:
        """A server with appendonly yes and appendfsync always has every acknowledged commit on
        its disk already. With replicas attached, one of them must also confirm it holds them,
        or a failover could lose what fsync() promised."""
        if self._read_only:
            return
        try:
            confirmed = self._link.call(self._confirm_by_replica)
        except redis.ResponseError as e:
            raise self._refused(e) from None
        self._check_nothing_lost()  # after the wait: a failover during it is caught too
        if confirmed == 0:
            raise MetaWriteFailed(errno.EIO, f"no replica of the metadata server {self._target.shown} "
                                             f"confirmed the latest changes within {self._replica_wait:g} s; "
                                             "they are on the primary's disk, but a failover now would lose them")

    def _check_nothing_lost(self) -> None:
        """EIO (once) when the server no longer holds writes this client made: a failover to a
        replica that had not received them. What was written since the last sync is gone.
        Commits may go on meanwhile (sync runs on a thread of its own): the count is read first,
        so the mark read after it can only be as high or higher."""
        acknowledged = self._writes
        held = int(self._link.call(lambda: self._redis.get(self._mark)) or 0)
        if not self._lost_writes and held >= acknowledged:
            return
        self._lost_writes = False
        self._link.call(lambda: self._redis.set(self._mark, self._writes))  # the loss is told once
        raise MetaWriteFailed(errno.EIO, f"the metadata server {self._target.shown} lost changes this node had "
                                         "made (a failover to a replica that had not received them): what was "
                                         "written since the last fsync is gone")

    def _confirm_by_replica(self) -> int | None:
        """How many replicas confirmed every change so far; None when the primary has none.
        WAIT covers what its own connection wrote, so that connection writes once first."""
        if not self._redis.execute_command("ROLE")[2]:
            return None
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(SYNC_MARK, b"")
            pipe.wait(1, int(self._replica_wait * 1000))
            return pipe.execute()[1]

    # -- pushes ------------------------------------------------------------

    def subscribe(self, listener: Listener, from_others: bool = False) -> None:
        """Have `listener` hear the keys every commit changes, from every node (this one too,
        unless `from_others`), on a thread of the engine's; None means anything may have changed
        (the subscription was lost for a while). The subscription is in place when this returns."""
        self._pushes.listen(listener, from_others,
                            lambda: self._link.call(self._pushes.subscribe))

    def close(self) -> None:
        """Wait for a replica as sync() does while the server answers; then let go of it."""
        try:
            if self._link.failure is None:
                self.sync()
                if not self._read_only:
                    self._redis.delete(self._mark)
        finally:
            self._pushes.stop()
            self._redis.close()


class ServerLink:
    """Calls to the server, retried through a brief loss for up to `window` seconds. A loss that
    outlasts it makes the metadata unavailable: calls then fail at once (EIO), but for one
    probe a second, until the server answers again."""

    def __init__(self, shown: str, window: float) -> None:
        self._shown = shown
        self._window = window
        self.failure: str | None = None
        self._probe_at = 0.0

    def call(self, op: Callable[[], T]) -> T:
        deadline = time.monotonic() + (0.0 if self.failure else self._window)
        delay = FIRST_DELAY_S
        while True:
            if self.failure is not None and time.monotonic() < self._probe_at:
                raise self._error()
            try:
                result = op()
            except _LOST as e:
                if time.monotonic() + delay > deadline:
                    raise self._lost(e) from None
                if delay == FIRST_DELAY_S:
                    log.warning("metadata server %s does not answer (%s); retrying for up to %g s",
                                self._shown, e, self._window)
                time.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(2 * delay, MAX_DELAY_S)
                continue
            if self.failure is not None:
                log.warning("metadata server %s answers again", self._shown)
                self.failure = None
            return result

    def _lost(self, error: Exception) -> MetaUnavailable:
        self._probe_at = time.monotonic() + PROBE_EVERY_S
        if self.failure is None:
            self.failure = (f"the metadata server {self._shown} cannot be reached ({error}): metadata "
                            "is unavailable until it answers again")
            log.error("%s", self.failure)
        return self._error()

    def _error(self) -> MetaUnavailable:
        return MetaUnavailable(errno.EIO, self.failure)


class Pushes:
    """The changed keys the commit script publishes, handed to listeners by a thread of its
    own. When the subscription was lost (a restart, a failover, a subscriber the server found
    too slow) and is back, listeners hear None: changes meanwhile went unheard."""

    def __init__(self, client: redis.Redis, channel: bytes, shown: str, origin: bytes) -> None:
        self._client = client
        self._channel = channel
        self._shown = shown
        self._origin = origin  # what this client's commits publish as theirs
        self._listeners: list[tuple[Listener, bool]] = []  # with whether it hears other clients only
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def listen(self, listener: Listener, from_others: bool, first_subscription: Callable[[], PubSub]) -> None:
        with self._lock:
            self._listeners.append((listener, from_others))
            if self._thread is None:
                pubsub = first_subscription()
                self._thread = threading.Thread(target=self._run, args=(pubsub,), name="aifs-meta-pushes",
                                                daemon=True)
                self._thread.start()

    def subscribe(self) -> PubSub:
        """A subscription to the channel, confirmed by the server: no commit after this returns
        goes unheard."""
        pubsub = self._client.pubsub()
        try:
            pubsub.subscribe(self._channel)
            confirmation = pubsub.get_message(timeout=CONNECT_TIMEOUT_S)
            if confirmation is None or confirmation["type"] != "subscribe":
                raise redis.TimeoutError(f"no confirmation of the subscription to {self._channel!r}")
        except BaseException:
            pubsub.close()
            raise
        return pubsub

    def _run(self, pubsub: PubSub) -> None:
        while not self._stopping.is_set():
            try:
                message = pubsub.get_message(timeout=POLL_S)
            except _LOST as e:
                pubsub.close()
                pubsub = self._subscribe_again(e)
                if pubsub is None:
                    return
                self._deliver(None, own=False)
                continue
            if message is not None and message["type"] == "message":
                origin, changed = _notice(message["data"])
                self._deliver(changed, own=origin == self._origin)
        pubsub.close()

    def _subscribe_again(self, error: Exception) -> PubSub | None:
        """A new subscription once the server answers; None when stopped first."""
        log.warning("change notices from metadata server %s were interrupted (%s); subscribing again",
                    self._shown, error)
        delay = FIRST_DELAY_S
        while not self._stopping.wait(delay * random.uniform(0.5, 1.0)):
            try:
                pubsub = self.subscribe()
            except _LOST:
                delay = min(2 * delay, MAX_DELAY_S)
                continue
            log.warning("change notices from metadata server %s resumed", self._shown)
            return pubsub
        return None

    def _deliver(self, changed: list[bytes] | None, own: bool) -> None:
        for listener, from_others in list(self._listeners):
            if own and from_others:
                continue
            try:
                listener(changed)
            except Exception:  # noqa: BLE001 - one failing listener must not silence the others
                log.exception("a listener of the metadata engine's change notices failed")

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(POLL_S + CONNECT_TIMEOUT_S + MAX_DELAY_S)


def _notice(data: bytes) -> tuple[bytes | None, list[bytes] | None]:
    """The origin and keys of a notice; (None, None) (anything may have changed, from anyone)
    for one this engine did not write."""
    try:
        origin, changed = msgpack.unpackb(data, raw=True)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None, None
    if isinstance(origin, bytes) and isinstance(changed, list) and all(isinstance(k, bytes) for k in changed):
        return origin, changed
    return None, None


def _check_key(key: bytes) -> None:
    if not key or key[:1] == RESERVED:
        raise ValueError(f"metadata key {key!r} does not start with a tag byte (0x00 is the redis engine's own)")


def _past(prefix: bytes) -> bytes:
    """The ZRANGEBYLEX bound just past every key that starts with `prefix`."""
    stem = prefix.rstrip(b"\xff")
    if not stem:
        return b"+"
    return b"(" + stem[:-1] + bytes([stem[-1] + 1])


def _present_and_absent(items: dict[bytes, bytes | None]) -> tuple[list[bytes], list[bytes]]:
    """`items` as a flat key, value, ... list of those with a value, and a list of those without."""
    present: list[bytes] = []
    absent: list[bytes] = []
    for key, value in items.items():
        if value is None:
            absent.append(key)
        else:
            present += (key, value)
    return present, absent


def _encode(batch: Batch) -> bytes:
    """The batch as the commit script's first argument (cmsgpack reads no bin types: raw str)."""
    for key in (*batch.ops, *batch.empty):
        _check_key(key)
    reads, absent = _present_and_absent(batch.reads)
    puts, deletes = _present_and_absent(batch.ops)
    increments = [part for key, delta in batch.increments.items() for part in (key, b"%d" % delta)]
    return msgpack.packb([reads, absent, batch.empty, puts, deletes, increments], use_bin_type=False)
