"""Where a shared Redis metadata engine lives ([meta] url), and a redis-py client for it.

    redis://[user:password@]host:6379/DB
    rediss://[user:password@]host:6379/DB?ssl_ca_certs=...   (TLS; redis-py's ssl_* options)
    redis+sentinel://[:password@]host1:26379,host2:26379/MASTER/DB

With Sentinel the client asks the sentinels which server is the primary of MASTER, and asks
again whenever its connections fail, so it follows failovers. The password is the data
servers' (the sentinels themselves are reached without one).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
from redis.sentinel import Sentinel

from aifs.meta.engines import redact

REDIS_PORT = 6379
SENTINEL_PORT = 26379
FORMS = ("redis://[user:password@]host:6379/DB, rediss://... (TLS) or "
         "redis+sentinel://[:password@]host:26379[,host:port...]/MASTER/DB")
_FLAGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_CERT_REQS = ("none", "optional", "required")


def _cert_reqs(value: str) -> str:
    if value not in _CERT_REQS:
        raise ValueError(f"ssl_cert_reqs is one of {', '.join(_CERT_REQS)}")
    return value


def _flag(value: str) -> bool:
    if value not in _FLAGS:
        raise ValueError("ssl_check_hostname is true or false")
    return _FLAGS[value]


TLS_OPTIONS: dict[str, Callable[[str], Any]] = {
    "ssl_ca_certs": str, "ssl_certfile": str, "ssl_keyfile": str,
    "ssl_cert_reqs": _cert_reqs, "ssl_check_hostname": _flag,
}


class MetaEngineError(OSError):
    """The metadata engine cannot be opened: a malformed URL, a server that cannot be reached,
    refused credentials. The message is one line for the operator. An OSError, so a command
    reports it as it reports an unreachable tier."""


@dataclass(frozen=True)
class RedisTarget:
    """A parsed [meta] url: the servers to reach and how to authenticate."""

    shown: str  # the URL without its password, for messages
    db: int
    username: str | None = None
    password: str | None = None
    host: str = ""
    port: int = REDIS_PORT
    tls: dict[str, Any] | None = None  # rediss: the ssl_* options (maybe none)
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str | None = None

    @property
    def channel(self) -> bytes:
        """The invalidation channel: Pub/Sub spans the server's databases, a volume owns one."""
        return b"aifs:changed:%d" % self.db

    def client(self, **connection: Any) -> redis.Redis:
        """A client of the primary; `connection` holds redis-py's socket and retry options."""
        auth = {"db": self.db, "username": self.username, "password": self.password}
        if self.master is None:
            ssl = {} if self.tls is None else {"ssl": True, **self.tls}
            return redis.Redis(host=self.host, port=self.port, **auth, **ssl, **connection)
        sentinel = Sentinel(list(self.sentinels), sentinel_kwargs=dict(connection), **connection)
        return sentinel.master_for(self.master, **auth)


def parse_redis_url(url: str) -> RedisTarget:
    """The target `url` names; MetaEngineError saying what is wrong with it otherwise."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "redis+sentinel":
            return _sentinel_target(parts)
        if parts.scheme in ("redis", "rediss"):
            return _server_target(parts)
        raise ValueError("the scheme is not redis, rediss or redis+sentinel")
    except ValueError as e:
        raise MetaEngineError(f"[meta] url {redact(url)!r} is not usable: {e}; use {FORMS}") from None


def _server_target(parts) -> RedisTarget:
    if not parts.hostname:
        raise ValueError("it names no host")
    db = _db(parts.path.lstrip("/"))
    secure = parts.scheme == "rediss"
    options = _options(parts.query, TLS_OPTIONS if secure else {})
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = parts.port or REDIS_PORT
    return RedisTarget(f"{parts.scheme}://{_user(parts)}{host}:{port}/{db}", db,
                       _unquoted(parts.username), _unquoted(parts.password), parts.hostname, port,
                       options if secure else None)


def _sentinel_target(parts) -> RedisTarget:
    userinfo, _, hosts = parts.netloc.rpartition("@")
    sentinels = tuple(_endpoint(item) for item in hosts.split(",")) if hosts else ()
    if not sentinels:
        raise ValueError("it names no sentinel")
    master, _, db_text = parts.path.lstrip("/").partition("/")
    if not master:
        raise ValueError("it names no master (the name the sentinels monitor)")
    db = _db(db_text)
    _options(parts.query, {})
    auth = urlsplit(f"//{userinfo}@h") if userinfo else None
    username = _unquoted(auth.username) if auth else None
    password = _unquoted(auth.password) if auth else None
    shown_hosts = ",".join(f"{h}:{p}" for h, p in sentinels)
    return RedisTarget(f"redis+sentinel://{shown_hosts}/{master}/{db}", db, username, password,
                       sentinels=sentinels, master=unquote(master))


def _endpoint(item: str) -> tuple[str, int]:
    parts = urlsplit(f"//{item}")
    if not parts.hostname:
        raise ValueError(f"sentinel {item!r} names no host")
    return parts.hostname, parts.port or SENTINEL_PORT


def _db(text: str) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError(f"the database {text!r} is not a number")
    return int(text)


def _options(query: str, allowed: dict[str, Callable[[str], Any]]) -> dict[str, Any]:
    options = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in allowed:
            known = ", ".join(allowed) if allowed else "none (TLS options need rediss://)"
            raise ValueError(f"unknown option {name!r} (options: {known})")
        options[name] = allowed[name](value)
    return options


def _unquoted(text: str | None) -> str | None:
    return None if text is None else unquote(text)


def _user(parts) -> str:
    return f"{parts.username}@" if parts.username else ""
