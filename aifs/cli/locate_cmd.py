"""`aifs locate`: where the bytes of files and trees are, by node and tier; with --by-node,
the nodes ranked by what they hold, as a Kubernetes node affinity and a Slurm node list."""

import json
from pathlib import Path

import click

from aifs.cli.common import EXIT_USAGE, fail
from aifs.control.client import ControlError
from aifs.dataflow.locate import FLASH_SERVERS, Location, locate as locate_paths
from aifs.dataflow.placement import Ranking, node_affinity, rank_nodes, slurm_nodelist, to_yaml
from aifs.units import size

SHOW_UNREADABLE = 20


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--by-node", is_flag=True,
              help="Rank the nodes by how much of all PATHS they hold, for a scheduler.")
@click.option("--top", type=click.IntRange(min=1), metavar="N",
              help="With --by-node: only the N nodes that hold the most (a job of N nodes).")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def locate(as_json: bool, by_node: bool, top: int | None, paths: tuple[Path, ...]) -> None:
    """Where the bytes of the files and trees under PATHS are: this node's RAM and NVMe,
    every other node of the volume, the flash servers and the durable tier.

    A node whose holdings could not be learned (it did not answer, or serves no blocks to
    its peers) is listed as unknown. Exits 1 when entries could not be read.
    """
    if top is not None and not by_node:
        fail("--top limits the ranking of --by-node; give both, or neither", EXIT_USAGE)
    try:
        found = locate_paths(paths)
    except ControlError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot read {e.filename}: {e.strerror}")
    if by_node:
        _show_ranking(found, top, as_json)
    elif as_json:
        click.echo(json.dumps([where.as_json() for where in found], indent=2))
    else:
        click.echo("\n".join(line for where in found for line in _place_lines(where)))
    _report_unreadable([entry for where in found for entry in where.unreadable])


def _files(count: int) -> str:
    return f"{count} file{'' if count == 1 else 's'}"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "     -"


def _place_lines(where: Location) -> list[str]:
    lines = [f"{where.path}: {_files(where.files)}, {size(where.bytes)}"]

    def place(name: str, held: int, note: str = "") -> None:
        lines.append(f"  {name:<24} {size(held):>12} {_share(held, where.bytes)}{note}")

    for node, held in sorted(where.nodes.items(), key=lambda item: (item[0] != where.node, item[0])):
        note = f"  this node (RAM {size(where.ram)}, NVMe {size(where.nvme)})" if node == where.node else ""
        place(node, held, note)
    if where.flash is not None:
        place("flash servers", where.flash)
    place(where.durable_tier, where.durable)
    lines += [f"  {name:<24} unknown: {why}" for name, why in sorted(where.unknown.items())]
    return lines


def _show_ranking(found: list[Location], top: int | None, as_json: bool) -> None:
    held: dict[str, int] = {}
    for where in found:
        for node, n in where.nodes.items():
            held[node] = held.get(node, 0) + n
    unknown = {name: why for where in found for name, why in where.unknown.items() if name != FLASH_SERVERS}
    ranking = rank_nodes({node: n for node, n in held.items() if node not in unknown}, top)
    total, files = sum(where.bytes for where in found), sum(where.files for where in found)
    if as_json:
        click.echo(json.dumps({"bytes": total, "files": files, "unknown": unknown,
                               "nodes": [{"node": node, "bytes": n} for node, n in ranking],
                               "kubernetes": {"affinity": node_affinity(ranking)},
                               "slurm": {"nodelist": slurm_nodelist(ranking)}}, indent=2))
    else:
        click.echo("\n".join(_ranking_lines(ranking, unknown, total, files)))


def _ranking_lines(ranking: Ranking, unknown: dict[str, str], total: int, files: int) -> list[str]:
    lines = [f"{size(total)} in {_files(files)}; nodes by bytes held:"]
    lines += [f"  {rank:>3}  {node:<24} {size(n):>12} {_share(n, total)}" for rank, (node, n) in enumerate(ranking, 1)]
    lines += [f"       {name:<24} unknown: {why}" for name, why in sorted(unknown.items())]
    if not ranking:
        return [*lines, "No node holds any of it: there is no node to prefer."]
    return [*lines, "", "Kubernetes (a pod spec's affinity):", to_yaml({"affinity": node_affinity(ranking)}).rstrip(),
            "", "Slurm:", f"  --nodelist={slurm_nodelist(ranking)}"]


def _report_unreadable(unreadable: list[str]) -> None:
    """Name the entries the walk could not read (they are not counted), and exit 1 if any."""
    for entry in unreadable[:SHOW_UNREADABLE]:
        click.echo(f"aifs: could not read {entry}", err=True)
    if len(unreadable) > SHOW_UNREADABLE:
        click.echo(f"aifs: ... and {len(unreadable) - SHOW_UNREADABLE} more entries could not be read", err=True)
    if unreadable:
        fail(f"{len(unreadable)} entries could not be read and are not counted")
