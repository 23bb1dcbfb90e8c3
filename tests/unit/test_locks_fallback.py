"""With a pyfuse3 that does not pass lock requests on, the kernel keeps locks per mount: a mount
of a shared volume says so once, and a one-node volume, where nothing changes, says nothing."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from aifs.fuse import ops
from aifs.fuse.attrs import Timeouts


def warnings_at_mount(monkeypatch, caplog, pyfuse3_passes_locks: bool, shared: bool) -> list[str]:
    monkeypatch.setattr(ops, "CLUSTER_LOCKS", pyfuse3_passes_locks)
    volume = SimpleNamespace(ns=None, cluster=object() if shared else None, data=SimpleNamespace())
    with caplog.at_level(logging.WARNING, logger=ops.__name__):
        ops.AifsOperations(volume, Timeouts(entry=1.0, attr=1.0), listing_attributes=1024)
    return [record.getMessage() for record in caplog.records if record.name == ops.__name__]


def test_a_shared_volume_warns_once_that_its_locks_are_node_local(monkeypatch, caplog) -> None:
    [warning] = warnings_at_mount(monkeypatch, caplog, pyfuse3_passes_locks=False, shared=True)
    assert "hold on this node only" in warning and "deploy/install.sh" in warning


@pytest.mark.parametrize("passes, shared", [(True, True), (False, False)])
def test_no_warning_when_locks_work_as_they_should(monkeypatch, caplog, passes, shared) -> None:
    assert warnings_at_mount(monkeypatch, caplog, passes, shared) == []


def test_the_installed_pyfuse3_is_the_patched_one() -> None:
    """deploy/install.sh builds pyfuse3 with deploy/patches; this environment must have it."""
    assert ops.CLUSTER_LOCKS
