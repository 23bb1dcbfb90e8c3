"""The text of `aifs status`: a mount's status report (aifs.vfs.status) as lines for people."""

from tqdm import tqdm

from aifs.units import rate, size

INDENT = " " * 12  # detail lines sit under the figures of the line above


def status_lines(report: dict) -> list[str]:
    """The volume, its metadata, each tier with its health, uploads, then tier_status_lines."""
    lines = [f"volume {report['state_dir']} (mounted {tqdm.format_interval(report['mounted_s'])} ago): "
             f"{report['open_files']} open files", _metadata_line(report["metadata"])]
    for name, tier in report["tiers"].items():
        lines += _tier_lines(name, tier)
    lines.append(f"  uploads   {report['pending_blocks']} blocks ({size(report['pending_bytes'])}) pending; "
                 f"since mount {report['uploaded_blocks']} uploaded ({size(report['uploaded_bytes'])}, "
                 f"{rate(report['upload_rate'])} on average)")
    if report["served_to_peers"]:
        lines.append("  served to peers: " + ", ".join(f"{host} {size(n)}" for host, n in report["served_to_peers"].items()))
    if report["adopted_blocks"] or report["stranded_blocks"]:
        lines.append(f"{INDENT}of nodes that are gone: {report['adopted_blocks']} blocks uploaded from the flash "
                     f"servers, {report['stranded_blocks']} staged only on those nodes (they wait for them)")
    return lines + tier_status_lines(report)


def _metadata_line(metadata: dict) -> str:
    state = "writable" if metadata["writable"] else f"read-only ({metadata['write_failure']})"
    line = f"  metadata: {metadata['engine']}, {state}"
    for info in metadata.get("sessions", ()):
        this = " (this mount)" if info["sid"] == metadata["session"] else ""
        serves = f", serves peers on {info['peer']}" if info.get("peer") else ""
        line += (f"\n    session {info['sid']}{this}: node {info['node']} on {info['host']}, "
                 f"pid {info['pid']}, {info['mountpoint']}, aifs {info['version']}{serves}")
    return line


def _tier_lines(name: str, tier: dict) -> list[str]:
    lines = [f"  {name:<9} {size(tier['used']):>10} of {size(tier['capacity']):>10}  "
             f"{tier['hits']} hits, {size(tier['bytes_read'])} read  {'up' if tier['up'] else 'DOWN'}"]
    if tier.get("used_from") == "metadata":
        lines.append(f"{INDENT}used: the volume's data by its metadata, less the uploads pending")
    problem = health_problem(tier, "peers" if name == "peers" else "flash servers")
    if problem:
        lines.append(f"{INDENT}{problem}")
    if name == "peers":
        lines += [f"{INDENT}{peer['server']} {'up' if peer['up'] else 'DOWN'}, {size(peer['fetched_bytes'])} fetched"
                  for peer in tier.get("servers", ())]
    return lines


def health_problem(tier: dict, servers_are: str = "flash servers") -> str | None:
    """What is wrong with a tier by its status entry (a durable tier's breaker, the health of
    its servers: flash servers or peers), or None when nothing is."""
    breaker = tier.get("breaker")
    if breaker is not None and breaker != "closed":
        doing = "a probe request is in flight" if breaker == "half-open" else "requests fail at once"
        return f"unreachable: circuit breaker {breaker} ({doing}); last error: {tier.get('last_error')}"
    servers = tier.get("servers", [])
    down = [s for s in servers if not s["up"]]
    if not down:
        return None
    which = ", ".join(f"{s['server']} down for {s['down_for_s']:.0f} s (circuit breaker {s['breaker']}; "
                      f"last error: {s['last_error']})" for s in down)
    return f"{len(servers) - len(down)} of {len(servers)} {servers_are} up; {which}"


def tier_status_lines(report: dict) -> list[str]:
    """Lines for pins, readahead and the hottest files."""
    lines = []
    for tier, pinned in report["pinned"].items():
        if pinned["files"]:
            lines.append(f"  pinned    {pinned['files']} files in {tier}: {size(pinned['bytes'])}, "
                         f"{size(pinned['resident'])} held")
    ahead = report["readahead"]
    lines.append(f"  readahead since mount {ahead['blocks']} blocks ({size(ahead['bytes'])}) fetched ahead, "
                 f"{ahead['deferred']} times deferred at the bound; {ahead['in_flight']} in flight now")
    hottest = report["hottest_files"]
    if hottest:
        lines.append(f"  hottest files (heat: 1 for each open or read of the file, halved every "
                     f"{report['heat_half_life_s']:.0f} s without use):")
        lines += [f"    {entry['heat']:>10.2f}  {entry['path'] or _unseen(entry['inode'])}" for entry in hottest]
    return lines


def _unseen(ino: int) -> str:
    return f"inode {ino}, path not seen since mount"
