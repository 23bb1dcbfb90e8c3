"""Flat-namespace metadata: every namespace object is one key in a sharded, transactional KV."""

from aifs.meta.attrs import Inode
from aifs.meta.engine import MetaEngine
from aifs.errors import FsError
from aifs.meta.writestate import MetaWriteFailed

__all__ = ["FsError", "Inode", "MetaEngine", "MetaWriteFailed"]
