"""Finding pyverbs and an RDMA device at run time, without ever failing an import.

The PyPI pyverbs does not build against Debian's rdma-core, while Debian's
python3-pyverbs installs for /usr/bin/python3. When this interpreter cannot
import pyverbs itself, the Debian copy is loaded, if its extension modules
were built for this interpreter's ABI (the import machinery only finds
extension files with this interpreter's suffixes), without putting the rest of
Debian's dist-packages on sys.path.
"""

import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

log = logging.getLogger(__name__)

DEBIAN_DIST = Path("/usr/lib/python3/dist-packages")
_SUBMODULES = ("pyverbs.device", "pyverbs.pyverbs_error")
_lock = threading.Lock()
_loaded: list[ModuleType | None] = []


@dataclass(frozen=True, slots=True)
class Probe:
    device: str | None  # the device to use, None when verbs cannot run here
    reason: str


def load_pyverbs() -> ModuleType | None:
    """The pyverbs package (with .device and .pyverbs_error loaded), or None; tried once per process."""
    with _lock:
        if not _loaded:
            _loaded.append(_import_pyverbs())
        return _loaded[0]


def _import_pyverbs() -> ModuleType | None:
    for directory in (None, DEBIAN_DIST):
        try:
            return _import_from(directory)
        except (ImportError, OSError) as e:  # OSError: libibverbs itself missing
            log.debug("pyverbs not importable from %s: %s", directory or "sys.path", e)
    return None


def _import_from(directory: Path | None) -> ModuleType:
    if directory is not None:
        spec = importlib.machinery.PathFinder.find_spec("pyverbs", [str(directory)])
        if spec is None or spec.loader is None:
            raise ImportError(f"no pyverbs in {directory}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["pyverbs"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["pyverbs"]
            raise
    try:
        for name in _SUBMODULES:
            importlib.import_module(name)
    except BaseException:
        for name in [n for n in sys.modules if n == "pyverbs" or n.startswith("pyverbs.")]:
            del sys.modules[name]
        raise
    return sys.modules["pyverbs"]


def probe_verbs(preferred: str | None = None,
                loader: Callable[[], Any] = load_pyverbs) -> Probe:
    """Whether verbs can run here, on which device, and why (or why not)."""
    pyverbs = loader()
    if pyverbs is None:
        return Probe(None, "pyverbs is not importable (Debian package python3-pyverbs)")
    try:
        devices = pyverbs.device.get_device_list()
    except pyverbs.pyverbs_error.PyverbsError as e:  # no device at all raises rather than returning []
        return Probe(None, f"no RDMA device ({e})")
    names = [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devices]
    if not names:
        return Probe(None, "no RDMA device")
    if preferred is None:
        return Probe(names[0], f"RDMA device {names[0]}")
    if preferred in names:
        return Probe(preferred, f"RDMA device {preferred}")
    return Probe(None, f"RDMA device {preferred} not found (have {', '.join(names)})")
