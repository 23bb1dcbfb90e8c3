"""Who may talk to a block server: a shared secret, proved at connect, and a MAC on every request.

Block ids derive from a volume's uuid, which is no secret, so without this anyone
who reaches a server's port could read, overwrite, delete or unpin any block.

At connect the server sends a fresh nonce; the client answers with its own nonce
and an HMAC of both under the secret; the server checks it and proves itself back
with an HMAC of both under a different label. Both then derive a session key from
the two nonces. Every request frame carries a tag after its header: an HMAC under
the session key of the request's number (both ends count, from 1) and the frame's
prefix and header, which hold the op, the block id, the payload's length and its
checksum. So a request cannot be forged, altered, replayed or reordered, on this
connection or on another (each has its own key). Answers are not tagged.

What this does not protect: the payload bytes are not secret (nothing is
encrypted), and an active attacker on the wire who can rewrite a payload to bytes
with the same xxh3 checksum (xxh3 is not a cryptographic hash) or rewrite an
answer is not stopped. Put the servers on a network you trust for that.

The handshake is written without I/O, so the threaded and the trio clients and
the server share it; only the sending and receiving of frames differ.
"""

import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aifs.rdma.transport import TransportError
from aifs.rdma.wire import AUTH, BUSY, TAG_BYTES

NONCE_BYTES = 32
MIN_SECRET_CHARS = 32
MAX_SECRET_BYTES = 4096
SCHEME = "hmac-sha256"
_CLIENT, _SERVER, _SESSION = b"aifs-flash client", b"aifs-flash server", b"aifs-flash session"
NO_HANDSHAKE = "the client sent a request before authenticating; it needs the volume's secret"


class AuthError(TransportError):
    """The peer did not prove it holds the secret, or refused ours."""


class SecretFileError(ValueError):
    """A secret file that cannot be used; `problem` says why and what to do."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"secret file {path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Secret:
    """The key every server and mount of a volume shares (never shown in a repr or a log)."""

    key: bytes = field(repr=False)

    @classmethod
    def from_file(cls, path: Path) -> "Secret":
        """Read and check a secret file; raises SecretFileError saying what is wrong."""
        return cls(read_secret_file(path))


def new_secret_text() -> str:
    """A fresh random secret as a line of a secret file."""
    return secrets.token_hex(32) + "\n"


def write_secret_file(path: Path) -> None:
    """A new secret at `path`, readable by its owner only; never replaces an existing file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SecretFileError(path, "already exists; remove it first if you mean to replace it "
                                    "(every server and mount using it then needs the new one)") from None
    except OSError as e:
        raise SecretFileError(path, f"cannot create it: {e.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(new_secret_text())


def _make_hint(path: Path) -> str:
    return f"make one with `aifs flash secret {path}`"


def read_secret_file(path: Path) -> bytes:
    """The secret in `path`: the file's text without surrounding whitespace.

    Refused when missing, unreadable, readable or writable by group or others, or too
    short to be a secret (the check runs on the opened file, so it is the file read).
    """
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise SecretFileError(path, f"is not a regular file; {_make_hint(path)}")
            if info.st_mode & 0o077:
                raise SecretFileError(path, f"other users may read or change it (mode {info.st_mode & 0o777:03o}); "
                                            f"run `chmod 600 {path}`")
            text = f.read(MAX_SECRET_BYTES + 1)
    except FileNotFoundError:
        raise SecretFileError(path, f"does not exist; {_make_hint(path)}") from None
    except IsADirectoryError:
        raise SecretFileError(path, f"is a directory; {_make_hint(path)}") from None
    except OSError as e:
        raise SecretFileError(path, f"cannot be read: {e.strerror}") from None
    if len(text) > MAX_SECRET_BYTES:
        raise SecretFileError(path, f"is larger than {MAX_SECRET_BYTES} bytes; is it the right file?")
    key = text.strip()
    if len(key) < MIN_SECRET_CHARS:
        raise SecretFileError(path, f"holds {len(key)} characters, a secret needs at least {MIN_SECRET_CHARS}; "
                                    f"{_make_hint(path)}")
    return key


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.digest(key, b"".join(parts), "sha256")


def _field(message: dict[str, Any], name: str, size: int) -> bytes:
    value = message.get(name)
    if not isinstance(value, bytes) or len(value) != size:
        raise AuthError(f"handshake field {name!r} is not {size} bytes")
    return value


class RequestMacs:
    """The tags of one connection's requests: under its session key, numbered in sending order.

    The client's instance signs and the server's checks; each counts the requests it
    saw, so a request must arrive exactly in its turn.
    """

    def __init__(self, session_key: bytes) -> None:
        self._key = session_key
        self._count = 0

    def _next(self, head: bytes | memoryview) -> bytes:
        self._count += 1
        return _mac(self._key, self._count.to_bytes(8, "big"), head)

    def seal(self, head: bytes) -> bytes:
        """A frame's prefix and header followed by its tag (the payload goes after)."""
        return head + self._next(head)

    def check(self, head: memoryview, tag: memoryview) -> None:
        """Raise AuthError unless `tag` is the next request's tag for `head`."""
        if not hmac.compare_digest(self._next(head), tag):
            raise AuthError(f"request {self._count} failed its MAC (forged, altered, replayed or out of turn)")


class ServerHandshake:
    """The server's side: `hello` to send, then `accept` the client's answer."""

    def __init__(self, secret: Secret) -> None:
        self._secret = secret
        self._nonce = secrets.token_bytes(NONCE_BYTES)

    @property
    def hello(self) -> dict[str, Any]:
        return {"auth": SCHEME, "nonce": self._nonce}

    def accept(self, answer: dict[str, Any]) -> tuple[dict[str, Any], RequestMacs]:
        """(the proof to send back, the checker of this connection's requests); AuthError
        when the client does not hold the secret."""
        if "mac" not in answer:
            raise AuthError(NO_HANDSHAKE)
        client_nonce = _field(answer, "nonce", NONCE_BYTES)
        nonces = self._nonce + client_nonce
        if not hmac.compare_digest(_mac(self._secret.key, _CLIENT, nonces), _field(answer, "mac", TAG_BYTES)):
            raise AuthError("the client does not hold this server's secret")
        proof = {"mac": _mac(self._secret.key, _SERVER, nonces)}
        return proof, RequestMacs(_mac(self._secret.key, _SESSION, nonces))


class ClientHandshake:
    """The client's side: `answer` the server's hello, then `finish` with its proof."""

    def __init__(self, secret: Secret, server: object) -> None:
        self._secret = secret
        self._server = server  # for messages
        self._nonces = b""

    def answer(self, hello: dict[str, Any]) -> dict[str, Any]:
        _refused(hello, self._server)
        if hello.get("auth") != SCHEME:
            raise AuthError(f"flash server {self._server} does not speak {SCHEME} (hello {hello!r:.80})")
        client_nonce = secrets.token_bytes(NONCE_BYTES)
        self._nonces = _field(hello, "nonce", NONCE_BYTES) + client_nonce
        return {"nonce": client_nonce, "mac": _mac(self._secret.key, _CLIENT, self._nonces)}

    def finish(self, proof: dict[str, Any]) -> RequestMacs:
        """The signer of this connection's requests, once the server proved it holds the secret."""
        _refused(proof, self._server)
        if not hmac.compare_digest(_mac(self._secret.key, _SERVER, self._nonces), _field(proof, "mac", TAG_BYTES)):
            raise AuthError(f"flash server {self._server} does not hold our secret")
        return RequestMacs(_mac(self._secret.key, _SESSION, self._nonces))


def _refused(message: dict[str, Any], server: object) -> None:
    """Raise what an error answer during the handshake means."""
    err = message.get("err")
    if err == AUTH:
        raise AuthError(f"flash server {server} refused our secret: the secret files of this client "
                        f"and the server differ")
    if err == BUSY:
        raise TransportError(f"flash server {server} is busy: {message.get('msg', '')}")
    if err is not None:
        raise AuthError(f"flash server {server} refused the connection: {err}: {message.get('msg', '')}")
