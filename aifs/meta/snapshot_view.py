"""A read-only view of a RocksDB directory that the open itself cannot change.

rocksdict rewrites its own small config file (rocksdict-config.json) whenever it opens a
database, even read-only, so a read-only open would still write into the state directory
(and fails outright on a read-only file system). The view is a private temporary
directory of symbolic links to the database's files, with a copy of that config file:
RocksDB reads the real files through the links, and whatever it or rocksdict writes lands
in the temporary directory.
"""

import os
import shutil
import tempfile
from pathlib import Path

ROCKSDICT_CONFIG = "rocksdict-config.json"


class ReadOnlyView:
    def __init__(self, source: Path) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="aifs-meta-view-"))
        for entry in os.scandir(source):
            target = self.path / entry.name
            if entry.name == ROCKSDICT_CONFIG:
                shutil.copyfile(entry.path, target)
            elif entry.name != "LOCK":
                target.symlink_to(entry.path)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
