"""From two samples of a mount's counters (aifs.vfs.stats) to what `aifs stats` shows: rates
over the time between them, and the figures of the moment as the later sample has them.

The result is also the JSON `aifs stats --json` prints; docs/operations.md lists its keys.
"""

from typing import Any

NO_OPERATIONS = {"count": 0, "errors": 0, "seconds": 0.0}


def _per_s(growth: float, seconds: float) -> float:
    return round(growth / seconds, 3)


def _latency_ms(seconds: float, count: float) -> float | None:
    """The mean time to answer, None when nothing was answered."""
    return round(1000 * seconds / count, 4) if count else None


def fuse_rates(before: dict, after: dict, seconds: float) -> dict[str, Any]:
    """Requests and errors per second with their mean latency: over all operations, and for each
    operation served in the interval, busiest first."""
    ops = {}
    for name, now in after.items():
        was = before.get(name, NO_OPERATIONS)
        delta = {key: now[key] - was[key] for key in NO_OPERATIONS}
        if delta["count"] > 0:
            ops[name] = delta
    total = {key: sum(delta[key] for delta in ops.values()) for key in NO_OPERATIONS}

    def per_second(delta: dict) -> dict[str, Any]:
        return {"ops_per_s": _per_s(delta["count"], seconds), "errors_per_s": _per_s(delta["errors"], seconds),
                "latency_ms": _latency_ms(delta["seconds"], delta["count"])}

    busiest = sorted(ops.items(), key=lambda item: -item[1]["count"])
    return {**per_second(total), "ops": {name: per_second(delta) for name, delta in busiest}}


def _servers(before: list[dict], after: list[dict], seconds: float) -> list[dict[str, Any]]:
    """Each flash server or peer's health now, with the requests it answered per second."""
    answered_before = {server["server"]: server["answered"] for server in before}
    reports = []
    for server in after:
        answered = server["answered"] - answered_before.get(server["server"], server["answered"])
        health = {key: value for key, value in server.items() if key != "answered"}
        reports.append({**health, "answered_per_s": _per_s(answered, seconds)})
    return reports


def tier_rates(before: dict, after: dict, seconds: float) -> dict[str, Any]:
    """Each tier, top to bottom: block reads it served and bytes read from it per second, its hit
    ratio (of the reads no tier above served, the share it served; None when none reached it),
    and its figures and health now."""
    reports = {}
    reached = 0  # block reads served by this tier or one below it, in the interval
    for name in reversed(after):
        now, was = after[name], before.get(name, after[name])
        hits = now["hits"] - was["hits"]
        reached += hits
        report = {"hits_per_s": _per_s(hits, seconds),
                  "bytes_read_per_s": _per_s(now["bytes_read"] - was["bytes_read"], seconds),
                  "hit_ratio": round(hits / reached, 4) if reached else None,
                  **{key: value for key, value in now.items() if key not in ("hits", "bytes_read")}}
        if "servers" in now:
            report["servers"] = _servers(was.get("servers", []), now["servers"], seconds)
        reports[name] = report
    return dict(reversed(reports.items()))


def upload_rates(before: dict, after: dict, seconds: float) -> dict[str, Any]:
    """The backlog now, and what was uploaded per second."""
    return {"pending_blocks": after["pending_blocks"], "pending_bytes": after["pending_bytes"],
            "dirty_bytes": after["dirty_bytes"], "offers_pending": after["offers_pending"],
            "uploaded_blocks_per_s": _per_s(after["uploaded_blocks"] - before["uploaded_blocks"], seconds),
            "uploaded_bytes_per_s": _per_s(after["uploaded_bytes"] - before["uploaded_bytes"], seconds)}


def rates(before: dict, after: dict) -> dict[str, Any]:
    """The rates between two samples of one mount, over the time the mount's clock says passed."""
    seconds = max(after["mounted_s"] - before["mounted_s"], 1e-9)
    return {"interval_s": round(seconds, 3),
            "fuse": fuse_rates(before["fuse"], after["fuse"], seconds),
            "tiers": tier_rates(before["tiers"], after["tiers"], seconds),
            "uploads": upload_rates(before["uploads"], after["uploads"], seconds)}
