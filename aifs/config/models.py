"""The schema of aifs.toml: one pydantic model per table, checked once at start."""

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from aifs.config import system
from aifs.config.pathglob import glob_regex
from aifs.rdma.auth import SecretFileError, read_secret_file

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
PiB = 1 << 50
DEFAULT_STATE_ROOT = Path("~/.local/share/aifs")
# Top to bottom; the durable kinds share the bottom level and exclude each other.
TIER_LEVEL = {"ram": 0, "nvme": 1, "remote": 2, "objstore": 3, "s3": 3}
DURABLE_KINDS = ("objstore", "s3")
TierKind = Literal["ram", "nvme", "remote", "objstore", "s3"]

_BYTE_SIZE = TypeAdapter(ByteSize)
_SIZE_HELP = "not a size; use bytes or a string like '8GiB'"
_VOLUME_NAME = re.compile(r"[A-Za-z0-9._-]+")
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def format_size(n: int) -> str:
    """Write a byte count as the config file would, exactly, so it parses back to `n`."""
    for unit, scale in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def _to_bytes(value: Any, message: str = _SIZE_HELP) -> int:
    """Sizes are human strings in the file ("8GiB"); a bare integer is bytes."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PydanticCustomError("size", message)
    try:
        return int(_BYTE_SIZE.validate_python(value))
    except ValidationError:
        raise PydanticCustomError("size", message) from None


def _to_capacity(value: Any) -> int | None:
    """The string "auto" becomes None: the tier sizes itself from the machine at mount time."""
    if value is None or value == "auto":
        return None
    return _to_bytes(value, _SIZE_HELP + ", or 'auto'")


def _block_size(value: int) -> int:
    """Blocks are the unit of every tier and of S3 objects; powers of two keep offsets cheap."""
    if not 64 * KiB <= value <= 64 * MiB or value & (value - 1):
        raise PydanticCustomError("block_size", "must be a power of two between 64KiB and 64MiB")
    return value


def _volume_name(value: str) -> str:
    """The name becomes a directory name, so it must be one safe path component."""
    if not _VOLUME_NAME.fullmatch(value) or value in (".", ".."):
        raise PydanticCustomError("volume_name", "use only letters, digits, '.', '_' and '-'")
    return value


def _absolute(path: Path, info: ValidationInfo) -> Path:
    """Expand `~` and anchor relative paths at the config file's folder, not the daemon's cwd."""
    path = path.expanduser()
    if path.is_absolute():
        return path
    base = (info.context or {}).get("base_dir") or Path.cwd()
    return Path(base).absolute() / path


def _existing_dir(path: Path) -> Path:
    """An explicit tier path names a disk the operator prepared; a typo must not fill `/`."""
    if not path.is_dir():
        exists = path.exists()
        why = "not a directory; use a directory" if exists else "no such directory; create it"
        raise PydanticCustomError(
            "directory",
            "{why} or remove the key to use the default under volume.state_dir",
            {"why": why},
        )
    return path


def _endpoint(value: str) -> str:
    """The scheme decides TLS, so it must be explicit; a path would end up in every key."""
    url = urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname or url.path.strip("/") or url.query:
        raise PydanticCustomError(
            "endpoint", "must be an http:// or https:// URL with a host and no path, like "
            "'https://s3.example.com' or 'http://127.0.0.1:9000'",
        )
    return value.rstrip("/")


def _bucket(value: str) -> str:
    if not _BUCKET_NAME.fullmatch(value) or ".." in value:
        raise PydanticCustomError(
            "bucket", "not an S3 bucket name; use 3 to 63 lowercase letters, digits, '.' and '-', "
            "starting and ending with a letter or digit",
        )
    return value


def _non_empty(value: Any) -> Any:
    """An empty string would silently mean "use the default"; leaving the key out says that."""
    if value == "":
        raise PydanticCustomError("empty", "must not be empty; remove the key to use the default")
    return value


def _key_prefix(value: str) -> str:
    """Keys are <prefix><fan-out>/<block id>: without its '/' a prefix would glue onto them."""
    if value and (not value.endswith("/") or value.startswith("/")):
        raise PydanticCustomError(
            "prefix", "must be empty, or end with '/' and not start with it, like 'volumes/train/'",
        )
    return value


Size = Annotated[int, BeforeValidator(_to_bytes)]
NonEmpty = Annotated[str, BeforeValidator(_non_empty)]
Secret = Annotated[SecretStr, BeforeValidator(_non_empty)]
Capacity = Annotated[int | None, BeforeValidator(_to_capacity)]
AbsPath = Annotated[Path, AfterValidator(_absolute)]
ExistingDir = Annotated[Path, AfterValidator(_absolute), AfterValidator(_existing_dir)]


class _Table(BaseModel):
    """Every table rejects unknown keys: a misspelt key silently ignored is a lost setting."""

    model_config = ConfigDict(extra="forbid")


class VolumeConfig(_Table):
    name: Annotated[str, AfterValidator(_volume_name)] = "default"
    state_dir: AbsPath
    block_size: Annotated[Size, AfterValidator(_block_size)] = 4 * MiB
    capacity: Capacity = None  # what df shows and writes may fill; auto: the durable tier's capacity

    @model_validator(mode="before")
    @classmethod
    def _default_state_dir(cls, data: Any) -> Any:
        """The state dir follows the volume name, so two volumes never share one by default."""
        if isinstance(data, dict) and "state_dir" not in data:
            name = data.get("name", cls.model_fields["name"].default)
            return {**data, "state_dir": DEFAULT_STATE_ROOT / str(name)}
        return data


META_SCHEMES = ("rocksdb", "redis", "rediss", "redis+sentinel")


def _meta_url(url: str | None) -> str | None:
    if url is not None and urlsplit(url).scheme not in META_SCHEMES:
        raise PydanticCustomError(
            "meta_url", "{url!r} names no metadata engine; use rocksdb:// (embedded, one node), "
            "redis://host:6379/0, rediss://... (TLS) or redis+sentinel://host:26379/master/0", {"url": url})
    return url


class MetaConfig(_Table):
    """Where the namespace lives: embedded RocksDB in the state dir (one node), or a shared
    engine that every node of the volume mounts, with sessions kept alive by heartbeats."""

    model_config = ConfigDict(allow_inf_nan=False)

    url: Annotated[str | None, AfterValidator(_meta_url)] = None
    shards: int = Field(8, ge=1, le=256, strict=True)
    heartbeat: float = Field(5.0, gt=0, strict=True)
    session_timeout: float = Field(60.0, gt=0, strict=True)
    remote_block_wait: float = Field(30.0, ge=0, strict=True)  # for a block still staged on another node

    @property
    def engine(self) -> str:
        """"rocksdb" or "redis"."""
        return "rocksdb" if self.url is None or self.url.startswith("rocksdb:") else "redis"

    @model_validator(mode="after")
    def _timeout_outlasts_heartbeats(self) -> "MetaConfig":
        if self.session_timeout < 2 * self.heartbeat:
            raise PydanticCustomError(
                "session_timeout", "session_timeout ({timeout}) must be at least twice heartbeat ({beat}), "
                "or a live node that misses one beat is declared dead",
                {"timeout": self.session_timeout, "beat": self.heartbeat})
        return self


class TierConfig(_Table):
    """Fields every tier has; `kind` selects the subclass, which adds kind-specific rules."""

    default_dir: ClassVar[str | None] = None  # folder under state_dir when `path` is unset
    no_path: ClassVar[str | None] = None  # set on kinds without a path: why one is an error

    kind: TierKind
    capacity: Capacity = None
    path: Path | None = None

    @field_validator("path", mode="before")
    @classmethod
    def _path_allowed(cls, value: Any) -> Any:
        """A path on a tier whose blocks live elsewhere is a misplaced key, not one to ignore."""
        if cls.no_path is not None:
            raise PydanticCustomError("tier_path", cls.no_path)
        return value

    def auto_capacity(self, path: Path | None) -> int:
        """Bytes this tier may use when capacity = "auto"; `path` is where its blocks live."""
        raise NotImplementedError


class RamTier(TierConfig):
    no_path: ClassVar[str | None] = "a ram tier has no path; remove the key"
    kind: Literal["ram"]

    def auto_capacity(self, path: Path | None) -> int:
        """A quarter of available memory leaves room for the training job itself."""
        return system.mem_available() // 4


class NvmeTier(TierConfig):
    default_dir: ClassVar[str | None] = "nvme"
    kind: Literal["nvme"]
    path: ExistingDir | None = None

    def auto_capacity(self, path: Path | None) -> int:
        """Half the free space: the disk is shared, and dirty blocks must never fill it."""
        assert path is not None
        return system.fs_free(path) // 2


def _usable_secret(path: Path) -> Path:
    """Found out at start, not as every read falling through to the durable tier."""
    try:
        read_secret_file(path)
    except SecretFileError as e:
        raise PydanticCustomError("secret_file", "{problem}", {"problem": e.problem}) from None
    return path


SecretFile = Annotated[AbsPath, AfterValidator(_usable_secret)]


def _host_port(value: str) -> str:
    """A flash server as `aifs flash serve --listen` takes it: HOST:PORT, an IPv6 host in brackets."""
    host, sep, port = value.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise PydanticCustomError(
            "host_port", "not a server address; use HOST:PORT, like 'flash1:7400' or '[fd00::1]:7400'",
        )
    return value


def _server_list(value: Any) -> Any:
    if not isinstance(value, list):
        raise PydanticCustomError("servers", "must be an array of HOST:PORT strings, like ['flash1:7400']")
    return value


def _servers(value: list[str]) -> list[str]:
    """Each server holds at most one copy or shard of a block, so a server listed twice is a mistake."""
    if not value:
        raise PydanticCustomError("servers", "no servers; list at least one, like ['flash1:7400']")
    twice = next((server for i, server in enumerate(value) if server in value[:i]), None)
    if twice is not None:
        raise PydanticCustomError("servers", "'{server}' is listed twice; list each server once",
                                  {"server": twice})
    return value


class ErasureCoding(_Table):
    """RS(k, m): a block becomes k data and m parity shards on k + m servers; any k rebuild it."""

    k: int = Field(ge=1, le=128, strict=True)
    m: int = Field(ge=1, le=128, strict=True)


class BlockClient(_Table):
    """How a mount talks to block servers, flash servers and peers alike: the transport, each
    request's timeout, the bound on one call's retries, and when a server counts as down."""

    model_config = ConfigDict(allow_inf_nan=False)

    transport: Literal["auto", "tcp", "verbs"] = "auto"
    rdma_device: NonEmpty | None = None
    timeout: float = Field(0.5, gt=0, strict=True)
    read_bound: float = Field(1.0, gt=0, strict=True)
    probe_interval: float = Field(1.0, gt=0, strict=True)
    failures_to_down: int = Field(3, ge=1, le=1000, strict=True)


class RemoteTier(BlockClient, TierConfig):
    """Flash servers shared by every node, between NVMe and the durable tier: a cache, whose
    copy of a block not yet in the durable tier is never the only one unless `only_copy`."""

    model_config = ConfigDict(allow_inf_nan=False)
    no_path: ClassVar[str | None] = "a remote tier has no path; its blocks live on the servers, remove the key"

    kind: Literal["remote"]
    servers: Annotated[
        list[Annotated[str, AfterValidator(_host_port)]], BeforeValidator(_server_list), AfterValidator(_servers),
    ]
    replicas: int | None = Field(None, ge=1, le=16, strict=True)  # None: 2, or 1 with one server or erasure
    # An optional table. Not `ErasureCoding | None`: errors.explain walks only discriminated unions.
    erasure: ErasureCoding = None  # type: ignore[assignment]
    only_copy: bool = Field(False, strict=True)
    secret_file: SecretFile  # the servers' --secret-file: they refuse every client without it

    @model_validator(mode="after")
    def _placement(self) -> "RemoteTier":
        """Every copy or shard of a block needs a server of its own; copies and shards exclude each other."""
        count = len(self.servers)
        if self.erasure is not None:
            k, m = self.erasure.k, self.erasure.m
            if self.replicas not in (None, 1):
                raise self._error("replicas", self.replicas, "copies and erasure coding exclude each other; "
                                  "remove replicas to use erasure, or remove erasure")
            if k + m > count:
                raise self._error("erasure", {"k": k, "m": m}, f"RS({k},{m}) puts {k + m} shards on as many "
                                  f"servers, but {count} are listed; list more servers or lower k + m")
            self.replicas = 1
        elif self.replicas is None:
            self.replicas = min(2, count)
        elif self.replicas > count:
            raise self._error("replicas", self.replicas, f"more copies than servers ({count} listed); "
                              f"use 1 to {count}, or list more servers")
        return self

    @staticmethod
    def _error(key: str, value: Any, message: str) -> PydanticCustomError:
        return PydanticCustomError("remote", message, {"config_key": key, "config_value": value})

    def auto_capacity(self, path: Path | None) -> int:
        """Only a mount asks the servers (status shows their total); here, like a bucket, no limit."""
        return PiB


class ObjstoreTier(TierConfig):
    default_dir: ClassVar[str | None] = "objects"
    kind: Literal["objstore"]
    path: ExistingDir | None = None

    def auto_capacity(self, path: Path | None) -> int:
        """The durable bottom tier may use its whole filesystem."""
        assert path is not None
        return system.fs_total(path)


class S3Tier(TierConfig):
    """The durable bottom tier in an S3 bucket: AWS, MinIO, Ceph RGW or any S3 endpoint."""

    model_config = ConfigDict(allow_inf_nan=False)
    no_path: ClassVar[str | None] = (
        "an s3 tier has no path; its blocks live under bucket and prefix, remove the key"
    )

    kind: Literal["s3"]
    endpoint: Annotated[str, AfterValidator(_endpoint)] | None = None
    bucket: Annotated[str, AfterValidator(_bucket)]
    prefix: Annotated[str, AfterValidator(_key_prefix)] = ""
    region: NonEmpty = "us-east-1"
    addressing: Literal["path", "virtual", "auto"] | None = None
    access_key: NonEmpty | None = None
    secret_key: Secret | None = None
    max_connections: int = Field(16, ge=1, le=1024, strict=True)
    connect_timeout: float = Field(5.0, gt=0, strict=True)
    read_timeout: float = Field(30.0, gt=0, strict=True)
    retries: int = Field(5, ge=0, le=20, strict=True)
    verify_tls: bool = Field(True, strict=True)
    sign_payload: Literal["auto", "always", "never"] = "auto"
    upload_process: bool = Field(False, strict=True)
    create_bucket: bool = Field(False, strict=True)
    breaker_failures: int = Field(5, ge=1, le=1000, strict=True)
    breaker_cooldown: float = Field(10.0, gt=0, strict=True)

    @model_validator(mode="after")
    def _default_addressing(self) -> "S3Tier":
        """Path-style for an explicit endpoint: MinIO, Ceph and loopback servers have no
        per-bucket DNS names; for AWS itself botocore picks per bucket ("auto")."""
        if self.addressing is None:
            self.addressing = "path" if self.endpoint else "auto"
        return self

    @model_validator(mode="after")
    def _both_keys_or_neither(self) -> "S3Tier":
        """Half a key pair would silently fall back to whatever the AWS chain finds."""
        if self.secret_key is None and self.access_key is not None:
            key, value, missing = "access_key", self.access_key, "secret_key"
        elif self.access_key is None and self.secret_key is not None:
            key, value, missing = "secret_key", str(self.secret_key), "access_key"
        else:
            return self
        raise PydanticCustomError(
            "s3_credentials",
            f"set without {missing}; set both, or neither to use the standard AWS chain "
            "(environment, profile, instance role)",
            {"config_key": key, "config_value": value},
        )

    def auto_capacity(self, path: Path | None) -> int:
        """A bucket has no size limit; 1 PiB keeps statfs (df) sane."""
        return PiB


AnyTier = Annotated[RamTier | NvmeTier | ObjstoreTier | S3Tier | RemoteTier, Field(discriminator="kind")]


SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL


def _bypass_socket(value: str) -> str:
    """"auto", "off", or where the data socket of aifs.bypass is bound."""
    if value in ("auto", "off"):
        return value
    if not value.startswith("/"):
        raise PydanticCustomError("bypass_socket", "use 'auto', 'off' or an absolute path for the socket")
    if len(value.encode()) > SOCKET_PATH_MAX:
        raise PydanticCustomError("bypass_socket", "a Unix socket path has at most {limit} bytes; use a shorter one",
                                  {"limit": SOCKET_PATH_MAX})
    return value


def _answer_board(value: int) -> int:
    """0, or a board large enough for its slots and a ring of records (aifs.bypass.board)."""
    if value and not MiB <= value <= 16 * GiB:
        raise PydanticCustomError("bypass_answers", "use 0 (no shared answers) or a size from 1MiB to 16GiB")
    return value


class FuseConfig(_Table):
    model_config = ConfigDict(allow_inf_nan=False)

    allow_other: bool = Field(True, strict=True)
    max_tasks: int = Field(64, ge=4, le=1024, strict=True)
    attr_timeout: float = Field(60.0, ge=0, strict=True)
    entry_timeout: float = Field(60.0, ge=0, strict=True)
    listing_attributes: int = Field(256, ge=0, strict=True)  # entries per listing sent with attributes
    read_ahead_kb: int = Field(1024, ge=0, le=65536, strict=True)
    direct_writes: bool = Field(True, strict=True)
    bypass_socket: Annotated[str, AfterValidator(_bypass_socket)] = "auto"  # aifs.bypass: reads without FUSE
    bypass_answers: Annotated[Size, AfterValidator(_answer_board)] = 64 * MiB  # shared by root readers


def holds_two_blocks(pack_size: int, pack_below: int | None) -> bool:
    """Whether a pack of `pack_size` holds two of the blocks `pack_below` packs (0 or None: none)."""
    return not pack_below or pack_size >= 2 * pack_below


class WritebackConfig(_Table):
    """How staged blocks move to the durable tier, and how long writers wait for room."""

    model_config = ConfigDict(allow_inf_nan=False)

    upload_concurrency: int = Field(8, ge=1, le=256, strict=True)
    uploads_beside_writers: int = Field(0, ge=0, le=256, strict=True)
    upload_bandwidth: Size = 0
    max_dirty: Capacity = None
    dirty_wait: float = Field(60.0, ge=0, strict=True)
    garbage_grace: float = Field(5.0, ge=0, strict=True)
    pack_below: Size = MiB
    pack_size: Size = 4 * MiB
    pack_wait: float = Field(2.0, ge=0, le=3600, strict=True)

    @model_validator(mode="after")
    def _packs_hold_small_blocks(self) -> "WritebackConfig":
        if not holds_two_blocks(self.pack_size, self.pack_below):
            raise PydanticCustomError(
                "pack_size",
                "pack_size ({size}) must be at least twice pack_below ({below}), or a pack could not "
                "hold two of the blocks it is for; set pack_below = 0 to upload every block on its own",
                {"size": format_size(self.pack_size), "below": format_size(self.pack_below)},
            )
        return self

    @model_validator(mode="after")
    def _beside_within_concurrency(self) -> "WritebackConfig":
        if self.uploads_beside_writers > self.upload_concurrency:
            raise PydanticCustomError(
                "uploads_beside_writers",
                "uploads_beside_writers ({beside}) is more than upload_concurrency ({total}); "
                "it is how many of those uploads may run while writers stage blocks",
                {"beside": self.uploads_beside_writers, "total": self.upload_concurrency},
            )
        return self


class LoggingConfig(_Table):
    """The mount's log; it rotates by size so that a long-lived mount cannot fill its disk."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    file: AbsPath | None = None
    max_size: Size = 64 * MiB  # 0: never rotate (logrotate with copytruncate does it)
    keep: int = Field(5, ge=1, le=100, strict=True)


_LOOPBACK = ("127.", "::1", "[::1]", "localhost")


def _listen(value: str) -> str:
    """HOST:PORT to listen on; an IPv6 host goes in brackets; port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise PydanticCustomError("listen", "not an address; use HOST:PORT, like '127.0.0.1:9464'")
    return value


class MetricsConfig(_Table):
    """The Prometheus endpoint of the mount: off unless `listen` is set, loopback unless allowed."""

    listen: Annotated[str, AfterValidator(_listen)] | None = None
    allow_remote: bool = Field(False, strict=True)

    @model_validator(mode="after")
    def _loopback_only(self) -> "MetricsConfig":
        """Metrics name paths and volumes: other hosts see them only when asked for explicitly."""
        if self.listen is not None and not self.allow_remote and not self.listen.startswith(_LOOPBACK):
            raise PydanticCustomError(
                "metrics_listen",
                "not a loopback address; use 127.0.0.1 or [::1], or set metrics.allow_remote = true "
                "to serve metrics to other hosts",
                {"config_key": "listen", "config_value": self.listen},
            )
        return self


WILDCARD_HOSTS = ("0.0.0.0", "[::]", "")


def _transform_names(names: list[str]) -> list[str]:
    from aifs.push.serving import enabled_names  # here: the push package imports modules that import this one

    try:
        enabled_names(names)
    except ValueError as e:
        raise PydanticCustomError("transforms", "{problem}", {"problem": str(e)}) from None
    return names


class ClusterConfig(BlockClient):
    """How this mount shares its RAM and NVMe with the other mounts of a shared volume: with
    `serve` set it answers their block reads, and reads blocks that hash to them from them
    rather than from the durable tier. Its peers are the sessions that advertise an address.
    `transforms` are those it runs for their push jobs (aifs.push) over the blocks it holds."""

    serve: Annotated[str, AfterValidator(_listen)] | None = None
    advertise: NonEmpty | None = None  # the host peers dial; by default the host of `serve`
    secret_file: SecretFile | None = None  # every mount of the volume holds the same one
    transforms: Annotated[list[str], AfterValidator(_transform_names)] = []
    mask_patterns: AbsPath | None = None  # a TOML file of mask patterns besides the built-in ones

    @model_validator(mode="after")
    def _transforms_served(self) -> "ClusterConfig":
        """Checked at start, as `aifs flash serve` checks its own: not at a peer's first job."""
        from aifs.push.serving import PEER_NODE, served_transforms  # here, as in _transform_names

        if (self.transforms or self.mask_patterns is not None) and self.serve is None:
            raise PydanticCustomError(
                "cluster", "transforms run on the block server this mount serves its peers; set cluster.serve "
                "too, or remove cluster.transforms and cluster.mask_patterns",
                {"config_key": "serve", "config_value": None})
        try:
            served_transforms(self.transforms, self.mask_patterns, PEER_NODE)
        except ValueError as e:
            raise PydanticCustomError("cluster", "{problem}", {"problem": str(e), "config_key": "mask_patterns",
                                                               "config_value": str(self.mask_patterns)}) from None
        return self

    @model_validator(mode="after")
    def _reachable(self) -> "ClusterConfig":
        if self.serve is None:
            return self
        if self.secret_file is None:
            raise PydanticCustomError(
                "cluster", "serving blocks to peers needs the volume's secret; set cluster.secret_file to a file "
                "made by 'aifs flash secret FILE' (the same on every node)",
                {"config_key": "secret_file", "config_value": None})
        if self.advertise is None and self.serve.rpartition(":")[0] in WILDCARD_HOSTS:
            raise PydanticCustomError(
                "cluster", "peers cannot dial a wildcard address; set cluster.advertise to this node's host name "
                "or address", {"config_key": "advertise", "config_value": None})
        return self

    @property
    def advertised_host(self) -> str:
        """The host other nodes dial to reach this mount's block server."""
        assert self.serve is not None
        return self.advertise or self.serve.rpartition(":")[0]


class PrefetchConfig(_Table):
    """Sample-order prefetch (docs/prefetch.md): how far ahead of each reader that hinted its
    order the mount fetches, and how much hinting it holds for all readers together."""

    model_config = ConfigDict(allow_inf_nan=False)

    files_ahead: int = Field(256, ge=1, le=65536, strict=True)  # per reader; a hint may ask for fewer
    bytes_ahead: Annotated[Size, Field(ge=1)] = 1 * GiB  # per reader; a hint may ask for fewer
    max_readers: int = Field(32, ge=1, le=1024, strict=True)
    max_files: int = Field(4_000_000, ge=1, le=100_000_000, strict=True)  # in all hints together
    idle_timeout: float = Field(600.0, gt=0, strict=True)

def _rule_glob(value: str) -> str:
    """Rules match paths inside the mount, which always start at its root."""
    if not value.startswith("/"):
        raise PydanticCustomError("glob", "must start with '/', like '/checkpoints/**'")
    try:
        glob_regex(value)
    except re.error as exc:
        raise PydanticCustomError("glob", "not a valid glob: {why}", {"why": exc.msg}) from None
    return value

class Rule(_Table):
    path: Annotated[str, AfterValidator(_rule_glob)]
    durability: Literal["local", "cluster", "remote"] | None = None  # None: the volume's (Config.durability)
    pin: Literal["ram", "nvme"] | None = None
    readahead: Size | None = None
    fetch: Literal["range", "block"] = "range"
    direct_writes: bool | None = Field(None, strict=True)  # None: [fuse] direct_writes
    pack_below: Size | None = None  # None: [writeback] pack_below; 0: never packed

    def matches(self, path: str) -> bool:
        """`**` crosses '/', `*` and `?` stay inside one name."""
        return glob_regex(self.path).match(path) is not None

def _default_tiers() -> list[TierConfig]:
    return [RamTier(kind="ram"), NvmeTier(kind="nvme"), ObjstoreTier(kind="objstore")]

def _tier_error(index: int, field: str, value: Any, message: str) -> PydanticCustomError:
    """Point a whole-config check at one key; the formatter reads config_key/config_value."""
    return PydanticCustomError(
        "tiers", message, {"config_key": f"tiers[{index}].{field}", "config_value": value}
    )

def _check_tier_order(tiers: list[TierConfig]) -> None:
    """Blocks flow down from caches to durable storage, so the order of kinds is fixed."""
    for i in range(1, len(tiers)):
        above, here = tiers[i - 1].kind, tiers[i].kind
        if here == above:
            raise _tier_error(i, "kind", here, f"a second {here} tier; list each kind at most once")
        if here in DURABLE_KINDS and above in DURABLE_KINDS:
            raise _tier_error(
                i, "kind", here,
                f"a second durable tier below the {above} tier at tiers[{i - 1}]; "
                "list exactly one of objstore and s3",
            )
        if TIER_LEVEL[here] < TIER_LEVEL[above]:
            raise _tier_error(
                i, "kind", here,
                f"listed below the {above} tier at tiers[{i - 1}]; "
                "tiers go top to bottom in the order ram, nvme, objstore (or s3), "
                "with a remote tier between nvme and the durable one",
            )
    kinds = [t.kind for t in tiers]
    if "nvme" not in kinds:
        raise _tiers_error(kinds, "no nvme tier; list exactly one, it is the write-back staging area")
    if not set(DURABLE_KINDS) & set(kinds):
        raise _tiers_error(
            kinds,
            "no objstore tier and no s3 tier; list exactly one of them, it is the durable bottom",
        )

def _tiers_error(kinds: list[str], message: str) -> PydanticCustomError:
    return PydanticCustomError("tiers", message, {"config_key": "tiers", "config_value": kinds})

def _check_capacities(tiers: list[TierConfig], block_size: int) -> None:
    """A tier that cannot hold one block would make every put fail."""
    for i, tier in enumerate(tiers):
        if tier.capacity is not None and tier.capacity < block_size:
            raise _tier_error(
                i, "capacity", format_size(tier.capacity),
                f"smaller than one block (volume.block_size = {format_size(block_size)}); "
                "use 'auto' or a larger size",
            )

class Config(_Table):
    volume: VolumeConfig = Field(default_factory=VolumeConfig)
    meta: MetaConfig = Field(default_factory=MetaConfig)
    tiers: list[AnyTier] = Field(default_factory=_default_tiers)
    fuse: FuseConfig = Field(default_factory=FuseConfig)
    writeback: WritebackConfig = Field(default_factory=WritebackConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    rules: list[Rule] = Field(default_factory=list)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    prefetch: PrefetchConfig = Field(default_factory=PrefetchConfig)

    @model_validator(mode="after")
    def _check_tiers(self) -> "Config":
        _check_tier_order(self.tiers)
        _check_capacities(self.tiers, self.volume.block_size)
        return self

    @model_validator(mode="after")
    def _cluster_durability_has_servers(self) -> "Config":
        """A copy safe from the loss of this node needs somewhere else to be."""
        if not any(tier.kind == "remote" for tier in self.tiers):
            for i, rule in enumerate(self.rules):
                if rule.durability == "cluster":
                    raise PydanticCustomError(
                        "rules", "durability = 'cluster' keeps a copy of each block on the flash servers, and no "
                        "remote tier is configured; add one, or use 'local' or 'remote'",
                        {"config_key": f"rules[{i}].durability", "config_value": "cluster"})
        return self

    @model_validator(mode="after")
    def _rule_packs_hold_small_blocks(self) -> "Config":
        """As for [writeback] pack_below: a pack must hold two of the blocks a rule packs."""
        for i, rule in enumerate(self.rules):
            if not holds_two_blocks(self.writeback.pack_size, rule.pack_below):
                raise PydanticCustomError(
                    "rules", "pack_below must be at most half of [writeback] pack_size ({size}), or a pack "
                    "could not hold two of the blocks it is for; set it to 0 to upload this path's blocks "
                    "each on its own", {"config_key": f"rules[{i}].pack_below",
                                        "config_value": format_size(rule.pack_below),
                                        "size": format_size(self.writeback.pack_size)})
        return self

    def durability(self, rule: "Rule | None") -> str:
        """What close() waits for under `rule`: its own setting, else "cluster" on a shared
        volume with flash servers (other nodes read the files at once), else "local"."""
        if rule is not None and rule.durability is not None:
            return rule.durability
        shared = self.meta.engine != "rocksdb"
        return "cluster" if shared and any(tier.kind == "remote" for tier in self.tiers) else "local"

    @model_validator(mode="after")
    def _peers_share_a_volume(self) -> "Config":
        """Peers are found through the sessions of a shared metadata engine."""
        if self.cluster.serve is not None and self.meta.engine == "rocksdb":
            raise PydanticCustomError(
                "cluster", "a volume on the embedded engine has one node and no peers; set meta.url to a shared "
                "engine (redis://...) or remove cluster.serve",
                {"config_key": "serve", "config_value": self.cluster.serve})
        return self

    def tier_path(self, tier: TierConfig) -> Path:
        """Where a disk tier keeps its blocks: its own path, else a folder in the state dir."""
        if tier.path is not None:
            return tier.path
        if tier.default_dir is None:
            raise ValueError(f"a {tier.kind} tier has no path")
        return self.volume.state_dir / tier.default_dir

    def capacity_of(self, tier: TierConfig) -> int:
        """Byte budget of a tier; "auto" is measured now and rounded down to whole blocks."""
        if tier.capacity is not None:
            return tier.capacity
        path = None if tier.default_dir is None else self.tier_path(tier)
        size = tier.auto_capacity(path)
        return size - size % self.volume.block_size

    def log_file(self) -> Path:
        """The log sits next to the state it describes unless the operator moved it."""
        return self.logging.file or self.volume.state_dir / "aifs.log"

    def rule_for(self, path: str) -> Rule:
        """The first rule whose glob matches wins, so list specific rules before broad ones."""
        return next((rule for rule in self.rules if rule.matches(path)), Rule(path="/**"))
