"""The text of `aifs stats`: one sample of rates (aifs.cli.stats_rates) as a compact table."""

import time

from aifs.cli.tier_status import INDENT, health_problem
from aifs.units import rate, size

OPS_SHOWN = 8  # the busiest operations get a line each; the others are named on one line


def _latency(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms * 1000:.0f} µs" if ms < 1 else f"{ms:.2f} ms"


def _operation_line(name: str, figures: dict) -> str:
    return (f"  {name:<12} {figures['ops_per_s']:>10.1f} {figures['errors_per_s']:>9.1f} "
            f"{_latency(figures['latency_ms']):>10}")


def fuse_lines(fuse: dict) -> list[str]:
    """All requests, then the busiest operations; one line when there were none."""
    if not fuse["ops"]:
        return ["  fuse: no requests"]
    lines = [f"  {'fuse':<12} {'ops/s':>10} {'errors/s':>9} {'latency':>10}", _operation_line("all", fuse)]
    busiest = list(fuse["ops"].items())
    lines += [_operation_line(name, figures) for name, figures in busiest[:OPS_SHOWN]]
    if len(busiest) > OPS_SHOWN:
        lines.append(f"  also: {', '.join(name for name, _ in busiest[OPS_SHOWN:])}")
    return lines


def _health(name: str, tier: dict) -> str:
    """up or DOWN, with the count of servers (or peers) up and the circuit breaker's state."""
    state = "up" if tier["up"] else "DOWN"
    if "servers" in tier:
        up = sum(server["up"] for server in tier["servers"])
        state += f", {up} of {len(tier['servers'])} {'peers' if name == 'peers' else 'servers'} up"
    if "breaker" in tier:
        state += f", breaker {tier['breaker']}"
    return state


def _tier_lines(name: str, tier: dict) -> list[str]:
    ratio = "-" if tier["hit_ratio"] is None else f"{100 * tier['hit_ratio']:.1f}%"
    lines = [f"  {name:<12} {rate(tier['bytes_read_per_s']):>14} {tier['hits_per_s']:>9.1f} {ratio:>9}  "
             f"{_health(name, tier)}"]
    problem = health_problem(tier, "peers" if name == "peers" else "flash servers")
    if problem:
        lines.append(f"{INDENT}{problem}")
    return lines


def tier_lines(tiers: dict) -> list[str]:
    lines = [f"  {'tier':<12} {'read':>14} {'hits/s':>9} {'hit ratio':>9}  health"]
    for name, tier in tiers.items():
        lines += _tier_lines(name, tier)
    return lines


def upload_line(uploads: dict) -> str:
    return (f"  uploads      {rate(uploads['uploaded_bytes_per_s'])}; {uploads['pending_blocks']} blocks "
            f"({size(uploads['pending_bytes'])}) pending, {size(uploads['dirty_bytes'])} dirty; "
            f"{uploads['offers_pending']} offers to shared caches pending")


def frame_lines(sample: dict) -> list[str]:
    """The whole frame: which mount and when, FUSE requests, tiers, uploads."""
    when = time.strftime("%H:%M:%S", time.localtime(sample["time"]))
    return [f"aifs stats {sample['mount']}  {when}  (rates over {sample['interval_s']:.1f} s)",
            *fuse_lines(sample["fuse"]), *tier_lines(sample["tiers"]), upload_line(sample["uploads"])]
