"""`aifs gc` on a volume whose bucket holds an object nothing refers to: the report names it and
its size, --delete removes it and nothing else: live blocks and retired blocks still in their
grace period stay, and the files read back from the bucket alone afterwards."""

import os

import pytest
from click.testing import CliRunner

from aifs.cli.gc_cmd import gc
from aifs.tiers.protocol import object_name

from .helpers_mount import PREFIX, MiB, bucket_keys, make_s3_volume, sync_wait

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

STRAY_ID = 0xDEADBEEF42
STRAY_SIZE = 12345
STRAY_KEY = PREFIX + object_name(STRAY_ID)
NOT_A_BLOCK = PREFIX + "notes.txt"  # not named like a block: gc must leave it alone


def run_gc(volume, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(gc, ["-c", str(volume.config), *args])
    return result.exit_code, result.output


@pytest.mark.timeout_s(120)
def test_gc_reports_then_deletes_only_the_stray_object(make_s3_volume, moto_server, bucket):
    volume = make_s3_volume(moto_server.endpoint, bucket, writeback={"garbage_grace": 3600})
    volume.mount()
    files = {"a.bin": os.urandom(3 * MiB + 5), "dir/b.bin": os.urandom(MiB // 2)}
    (volume.path / "dir").mkdir()
    for name, data in files.items():
        (volume.path / name).write_bytes(data)
    (volume.path / "retired.bin").write_bytes(os.urandom(2 * MiB))
    sync_wait(volume.path)
    os.unlink(volume.path / "retired.bin")  # its objects stay in the bucket, queued as garbage

    code, out = run_gc(volume)
    assert code == 2 and "in use" in out, out  # refuses to run beside the mount
    volume.umount()

    client = moto_server.client()
    client.put_object(Bucket=bucket, Key=STRAY_KEY, Body=os.urandom(STRAY_SIZE))
    client.put_object(Bucket=bucket, Key=NOT_A_BLOCK, Body=b"left by an operator")
    before = bucket_keys(client, bucket)

    code, out = run_gc(volume)
    print(out)
    assert code == 0, out
    assert f"stray object s3://{bucket}/{STRAY_KEY}: {STRAY_SIZE} bytes" in out
    assert out.count("stray object") == 1
    assert f"1 unreferenced of {len(before) - 2} objects, {STRAY_SIZE} bytes" in out  # - marker, notes
    assert bucket_keys(client, bucket) == before  # a report changes nothing

    code, out = run_gc(volume, "--delete")
    print(out)
    assert code == 0 and "1 deleted, 0 failed" in out, out
    assert bucket_keys(client, bucket) == before - {STRAY_KEY}
    code, out = run_gc(volume)
    assert code == 0 and "0 unreferenced" in out and "nothing to do" in out, out

    volume.wipe_local()
    volume.mount()
    for name, data in files.items():
        assert (volume.path / name).read_bytes() == data, name
