"""The aifs.toml configuration: schema, loading, and error messages that name the key."""

from aifs.config.errors import ConfigError
from aifs.config.loader import default_config, load_config
from aifs.config.machine import machine_warnings
from aifs.config.models import (
    Config,
    FuseConfig,
    WritebackConfig,
    LoggingConfig,
    MetaConfig,
    NvmeTier,
    ObjstoreTier,
    RamTier,
    Rule,
    TierConfig,
    VolumeConfig,
    format_size,
)

__all__ = [
    "Config",
    "ConfigError",
    "FuseConfig",
    "WritebackConfig",
    "LoggingConfig",
    "MetaConfig",
    "NvmeTier",
    "ObjstoreTier",
    "RamTier",
    "Rule",
    "TierConfig",
    "VolumeConfig",
    "default_config",
    "format_size",
    "load_config",
    "machine_warnings",
]
