"""An object rotten in the bucket is never returned: once the local copies are gone, reading
its bytes fails with EIO (every time), the intact blocks of the same file still read, and the
mount's log names the block and the tier it came from."""

import errno
import os

import pytest

from .helpers_mount import BLOCK, block_objects, make_s3_volume, sync_wait

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it


def key_of(objects: dict[str, bytes], data: bytes) -> str:
    (key,) = [key for key, body in objects.items() if body == data]
    return key


def block_id(key: str) -> int:
    return int(key.rsplit("/", 1)[1], 16)


def pread_errno(path, offset: int, length: int) -> int | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, length, offset)
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)
    return None


@pytest.mark.timeout_s(120)
def test_rotten_objects_give_eio_and_a_log_line_never_bad_bytes(make_s3_volume, moto_server, bucket):
    blocks = [os.urandom(BLOCK) for _ in range(4)]
    volume = make_s3_volume(moto_server.endpoint, bucket)
    volume.mount()
    model = volume.path / "model.bin"
    model.write_bytes(b"".join(blocks))
    sync_wait(volume.path)
    volume.umount()
    volume.wipe_local()

    client = moto_server.client()
    objects = block_objects(client, bucket)
    assert len(objects) == len(blocks)
    flipped, swapped = key_of(objects, blocks[1]), key_of(objects, blocks[3])
    rotten = bytearray(blocks[1])
    rotten[200] ^= 0x01  # one bit, in the chunk that the small reads below fetch on their own
    client.put_object(Bucket=bucket, Key=flipped, Body=bytes(rotten))
    client.put_object(Bucket=bucket, Key=swapped, Body=blocks[2])  # a well-formed block, but not this one

    volume.mount()
    with open(model, "rb", buffering=0) as f:
        assert os.pread(f.fileno(), BLOCK, 0) == blocks[0]
        assert os.pread(f.fileno(), BLOCK, 2 * BLOCK) == blocks[2]
    for index in (1, 3):
        for _ in range(2):  # the bad copy was not cached anywhere on the way
            assert pread_errno(model, index * BLOCK + 100, 4096) == errno.EIO
    with pytest.raises(OSError) as info:
        model.read_bytes()
    assert info.value.errno == errno.EIO

    log = volume.log_text()
    for key in (flipped, swapped):
        assert f"block {block_id(key):016x} from tier s3 failed its checksum" in log, log[-3000:]
