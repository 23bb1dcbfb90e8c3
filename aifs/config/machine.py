"""Capacities that promise more than this machine has: allowed (a config may be written for
bigger nodes), but said out loud by `aifs config check` and by the mount."""

from aifs.config import system
from aifs.config.models import Config
from aifs.units import size


def machine_warnings(config: Config) -> list[str]:
    """One sentence per tier whose explicit capacity exceeds the memory or disk behind it."""
    warnings = []
    for index, tier in enumerate(config.tiers):
        if tier.capacity is None:
            continue
        if tier.kind == "ram":
            have, what = system.mem_total(), "this machine's memory"
        elif tier.kind in ("nvme", "objstore"):
            path = config.tier_path(tier)
            have, what = system.fs_total(path), f"the file system holding {path}"
        else:
            continue
        if tier.capacity > have:
            warnings.append(f"tiers[{index}] ({tier.kind}) capacity {size(tier.capacity)} is more than "
                            f"{what} ({size(have)}); the tier will run out before it is full")
    return warnings
