"""The schema of aifs.toml: one pydantic model per table, checked once at start."""

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from aifs.config import system
from aifs.config.pathglob import glob_regex

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
DEFAULT_STATE_ROOT = Path("~/.local/share/aifs")
TIER_ORDER = ("ram", "nvme", "objstore")
TierKind = Literal["ram", "nvme", "objstore"]

_BYTE_SIZE = TypeAdapter(ByteSize)
_SIZE_HELP = "not a size; use bytes or a string like '8GiB'"
_VOLUME_NAME = re.compile(r"[A-Za-z0-9._-]+")


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


Size = Annotated[int, BeforeValidator(_to_bytes)]
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

    @model_validator(mode="before")
    @classmethod
    def _default_state_dir(cls, data: Any) -> Any:
        """The state dir follows the volume name, so two volumes never share one by default."""
        if isinstance(data, dict) and "state_dir" not in data:
            name = data.get("name", cls.model_fields["name"].default)
            return {**data, "state_dir": DEFAULT_STATE_ROOT / str(name)}
        return data


class MetaConfig(_Table):
    shards: int = Field(8, ge=1, le=256, strict=True)


class TierConfig(_Table):
    """Fields every tier has; `kind` selects the subclass, which adds kind-specific rules."""

    default_dir: ClassVar[str | None] = None  # folder under state_dir when `path` is unset

    kind: TierKind
    capacity: Capacity = None
    path: Path | None = None

    def auto_capacity(self, path: Path | None) -> int:
        """Bytes this tier may use when capacity = "auto"; `path` is where its blocks live."""
        raise NotImplementedError


class RamTier(TierConfig):
    kind: Literal["ram"]

    @field_validator("path", mode="before")
    @classmethod
    def _no_path(cls, value: Any) -> Any:
        """A RAM tier lives in the daemon's memory; a path here means a misplaced key."""
        raise PydanticCustomError("ram_path", "a ram tier has no path; remove the key")

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


class ObjstoreTier(TierConfig):
    default_dir: ClassVar[str | None] = "objects"
    kind: Literal["objstore"]
    path: ExistingDir | None = None

    def auto_capacity(self, path: Path | None) -> int:
        """The durable bottom tier may use its whole filesystem."""
        assert path is not None
        return system.fs_total(path)


AnyTier = Annotated[RamTier | NvmeTier | ObjstoreTier, Field(discriminator="kind")]


class FuseConfig(_Table):
    model_config = ConfigDict(allow_inf_nan=False)

    allow_other: bool = Field(True, strict=True)
    max_tasks: int = Field(64, ge=4, le=1024, strict=True)
    attr_timeout: float = Field(60.0, ge=0, strict=True)
    entry_timeout: float = Field(60.0, ge=0, strict=True)
    read_ahead_kb: int = Field(1024, ge=0, le=65536, strict=True)


class LoggingConfig(_Table):
    level: Literal["debug", "info", "warning", "error"] = "info"
    file: AbsPath | None = None


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
    durability: Literal["local", "remote"] = "local"

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
        if TIER_ORDER.index(here) < TIER_ORDER.index(above):
            raise _tier_error(
                i, "kind", here,
                f"listed below the {above} tier at tiers[{i - 1}]; "
                "tiers go top to bottom in the order ram, nvme, objstore",
            )
    kinds = [t.kind for t in tiers]
    for kind, role in (("nvme", "the write-back staging area"), ("objstore", "the durable bottom")):
        if kind not in kinds:
            raise PydanticCustomError(
                "tiers",
                f"no {kind} tier; list exactly one, it is {role}",
                {"config_key": "tiers", "config_value": kinds},
            )


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
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    rules: list[Rule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_tiers(self) -> "Config":
        _check_tier_order(self.tiers)
        _check_capacities(self.tiers, self.volume.block_size)
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
