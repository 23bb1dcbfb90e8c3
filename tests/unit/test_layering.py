"""The block store's layering, read from the source: aifs/tiers knows the remote tiers only by
their protocols (aifs/blockstore composes them), and the layers above reach the tiers through
the TierManager alone, never through a particular tier."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aifs"
TIER_ATTRIBUTES = {"nvme", "ram", "cold", "remote", "peers"}
CONCRETE_TIERS = {"aifs.tiers.nvme", "aifs.tiers.ram", "aifs.tiers.objstore", "aifs.tiers.s3", "aifs.flash.tier"}
ABOVE_THE_TIERS = ("vfs", "fuse", "metrics", "bypass", "client")


def _modules(*packages: str) -> list[Path]:
    return sorted(path for package in packages for path in (PACKAGE / package).rglob("*.py"))


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _tier_reaches(tree: ast.AST) -> list[str]:
    """`tiers.nvme`, `self.tiers.cold`, `self._tiers.remote` and the like."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in TIER_ATTRIBUTES:
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name.lstrip("_") == "tiers":
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


@pytest.mark.parametrize("path", _modules("tiers"), ids=_relative)
def test_the_tiers_import_neither_the_flash_client_nor_the_transports(path):
    imported = _imported(ast.parse(path.read_text()))
    assert not {name for name in imported if name.split(".")[:2] in (["aifs", "flash"], ["aifs", "rdma"])}


@pytest.mark.parametrize("path", _modules(*ABOVE_THE_TIERS), ids=_relative)
def test_the_layers_above_hold_no_particular_tier(path):
    tree = ast.parse(path.read_text())
    assert not _imported(tree) & CONCRETE_TIERS
    assert not _tier_reaches(tree)
