"""Lines `aifs status` adds for pins, readahead and the hottest files (from the mount's status report)."""

from tqdm import tqdm


def _human(nbytes: float) -> str:
    return tqdm.format_sizeof(nbytes, "B", 1024)


def tier_status_lines(report: dict) -> list[str]:
    lines = []
    for tier, pinned in report.get("pinned", {}).items():
        if pinned["files"]:
            lines.append(f"  pinned    {pinned['files']} files in {tier}: {_human(pinned['bytes'])}, "
                         f"{_human(pinned['resident'])} held")
    ahead = report.get("readahead")
    if ahead is not None:
        lines.append(f"  readahead {ahead['blocks']} blocks ({_human(ahead['bytes'])}), "
                     f"{ahead['in_flight']} in flight, {ahead['deferred']} deferred")
    hottest = report.get("hottest_files", [])
    if hottest:
        lines.append("  hottest files:")
        lines += [f"    {entry['heat']:>10.2f}  {entry['path'] or 'inode ' + str(entry['inode'])}"
                  for entry in hottest]
    return lines
