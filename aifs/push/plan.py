"""The mount's side of a push job (the `push_plan` control operation): each file's blocks,
their ids on the flash servers and the servers that hold whole copies of them, so that the
client sends each piece of work to where its bytes are."""

from typing import Any

from aifs.config.models import RemoteTier
from aifs.flash.tier import RemoteFlashTier
from aifs.vfs.volume import Volume


def _remote_config(volume: Volume) -> RemoteTier | None:
    return next((tier for tier in volume.config.tiers if isinstance(tier, RemoteTier)), None)


def push_plan(volume: Volume, files: list[int]) -> dict[str, Any]:
    """`files` are regular files' inodes. A piece is [block index, id on the servers, the servers in
    the order to ask them, offset and length in the object]; a file's bytes that no piece
    covers (holes) are read through the mount."""
    remote = volume.tiers.remote
    config = _remote_config(volume)
    return {
        "block_size": volume.config.volume.block_size,
        "secret_file": str(config.secret_file) if config is not None else None,
        "timeout": config.timeout if config is not None else 0.0,
        "files": [{"ino": ino, "size": volume.meta.getattr(ino).size, "pieces": [
            [index, *_placed(remote, ref.block_id), ref.offset, ref.length]
            for index, ref in sorted(volume.meta.all_block_refs(ino).items())
        ]} for ino in files],
    }


def _placed(remote: RemoteFlashTier | None, block_id: int) -> tuple[int, list[str]]:
    return remote.whole_copies(block_id) if remote is not None else (block_id, [])
