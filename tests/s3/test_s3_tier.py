"""S3Tier against a real S3 endpoint (moto's server, over HTTP): the tier protocol, the
object layout, the volume marker and the errors a misconfigured bucket gives."""

import errno
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest

from aifs.config.models import S3Tier as S3Settings
from aifs.tiers.protocol import object_name
from aifs.tiers.s3 import S3Error, S3Tier
from aifs.tiers.s3_client import make_client, signs_payload
from aifs.tiers.s3_marker import MARKER_NAME, S3SetupError

from .conftest import new_volume, s3_settings

MiB = 1 << 20


def test_put_get_contains_delete_round_trip(open_tier, moto_server, bucket):
    tier = open_tier()
    blocks = {1: os.urandom(4 * MiB), 0x1FF: os.urandom(1000), 1 << 40: b"x"}
    for block_id, data in blocks.items():
        tier.put(block_id, data)
    for block_id, data in blocks.items():
        assert tier.contains(block_id)
        assert tier.get(block_id) == data
    assert tier.get(2) is None and not tier.contains(2)
    assert tier.used() == sum(map(len, blocks.values()))
    # layout: <prefix><low byte>/<16 hex digits>, read back by a client of its own
    raw = moto_server.client().get_object(Bucket=bucket, Key="ff/00000000000001ff")
    assert raw["Body"].read() == blocks[0x1FF]
    tier.delete(0x1FF)
    tier.delete(0x1FF)  # deleting what is gone is not an error
    assert not tier.contains(0x1FF) and tier.get(0x1FF) is None
    assert tier.get(1) == blocks[1]


def test_delete_many_deletes_in_batches(open_tier, monkeypatch):
    tier = open_tier()
    for block_id in range(1, 6):
        tier.put(block_id, b"b%d" % block_id)
    monkeypatch.setattr("aifs.tiers.s3.DELETE_BATCH", 2)
    tier.delete_many([1, 2, 3, 4, 99])  # an object that is not there is no error, as for DELETE
    assert [block_id for block_id in range(1, 6) if tier.contains(block_id)] == [5]


def test_put_of_a_block_id_again_replaces_it(open_tier):
    tier = open_tier()
    tier.put(7, b"first")
    tier.put(7, b"second")  # an upload retried after a crash rewrites the whole object
    assert tier.get(7) == b"second"


def test_get_range(open_tier):
    tier = open_tier()
    data = os.urandom(MiB)
    tier.put(5, data)
    assert tier.get_range(5, 0, 10) == data[:10]
    assert tier.get_range(5, 123_456, 65_536) == data[123_456:123_456 + 65_536]
    assert tier.get_range(5, MiB - 5, 100) == data[-5:]  # short at the object's end
    assert tier.get_range(6, 0, 10) is None
    with pytest.raises(ValueError):
        tier.get_range(5, 0, 0)


def test_block_ids_lists_only_this_prefix_across_pages(moto_server, bucket):
    tier = S3Tier(s3_settings(moto_server, bucket, prefix="vol/a/"), 1 << 50, new_volume())
    ids = set(range(1, 1006))  # more than one LIST page (1,000 keys)
    client = moto_server.client()
    keys = ["vol/a/" + object_name(i) for i in ids]
    not_blocks_here = ["vol/a/readme.txt", "vol/a/zz/0000000000000001", "vol/b/01/0000000000000001"]
    keys += not_blocks_here + [object_name(1)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b"b"), keys))
    assert sorted(tier.block_ids()) == sorted(ids)


def test_fresh_prefix_gets_a_marker_and_reopening_it_is_fine(open_tier, moto_server, bucket):
    volume = new_volume(block_size=MiB)
    open_tier(volume, prefix="p/")
    raw = moto_server.client().get_object(Bucket=bucket, Key="p/" + MARKER_NAME)["Body"].read()
    assert json.loads(raw) == {"uuid": volume.uuid, "block_size": MiB, "format": 1}
    open_tier(volume, prefix="p/").put(1, b"again")


def test_another_volume_on_the_same_prefix_is_refused(open_tier, bucket):
    first, second = new_volume(), new_volume()
    open_tier(first, prefix="train/")
    with pytest.raises(S3SetupError) as info:
        open_tier(second, prefix="train/")
    message = str(info.value)
    assert f"s3://{bucket}/train/" in message
    assert "belongs to another aifs volume" in message
    assert first.uuid in message and second.uuid in message
    open_tier(second, prefix="other/")  # a different prefix of the same bucket is fine
    open_tier(second)  # and so is the bucket's root


def test_a_foreign_marker_is_refused(open_tier, moto_server, bucket):
    moto_server.client().put_object(Bucket=bucket, Key=MARKER_NAME, Body=b"<html>")
    with pytest.raises(S3SetupError, match="not a valid aifs volume marker"):
        open_tier()


def test_missing_bucket_is_a_clear_error(moto_server):
    settings = s3_settings(moto_server, "no-such-bucket")
    with pytest.raises(S3SetupError) as info:
        S3Tier(settings, 1 << 50, new_volume())
    message = str(info.value)
    assert "bucket 'no-such-bucket' does not exist" in message and moto_server.endpoint in message
    assert "create_bucket = true" in message
    with pytest.raises(Exception):
        moto_server.client().head_bucket(Bucket="no-such-bucket")  # nothing was created


def test_create_bucket_when_asked(moto_server):
    settings = s3_settings(moto_server, "made-by-aifs", create_bucket=True)
    S3Tier(settings, 1 << 50, new_volume()).put(3, b"data")
    body = moto_server.client().get_object(Bucket="made-by-aifs", Key=object_name(3))["Body"].read()
    assert body == b"data"


def test_http_endpoint_ignores_a_broken_ca_bundle(open_tier, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "missing.pem"))
    tier = open_tier()
    tier.put(9, b"plain http")
    assert tier.get(9) == b"plain http"


def test_a_bucket_deleted_under_the_tier_gives_eio_at_once(open_tier, moto_server, bucket):
    tier = open_tier()
    client = moto_server.client()
    client.delete_object(Bucket=bucket, Key=MARKER_NAME)
    client.delete_bucket(Bucket=bucket)
    with pytest.raises(S3Error) as info:
        tier.put(0x42, b"lost?")  # a final answer: not retried, and never a silent success
    assert info.value.errno == errno.EIO and info.value.code == "NoSuchBucket"
    assert f"PUT s3://{bucket}/42/0000000000000042 failed" in str(info.value)
    assert "gave up" not in str(info.value)
    assert tier.breaker.state == "closed"  # S3 answered: it is up


@pytest.mark.parametrize("sign, signed", [("auto", True), ("always", True), ("never", False)])
def test_payload_signing_over_http(moto_server, bucket, sign, signed):
    """Over plain http "auto" signs each body's SHA-256; "never" sends it unsigned, and
    the server takes the object all the same."""
    client = make_client(s3_settings(moto_server, bucket, sign_payload=sign))
    sent: list[str] = []
    client.meta.events.register("before-send.s3.PutObject",
                                lambda request, **_: sent.append(request.headers["X-Amz-Content-SHA256"].decode()))
    body = os.urandom(MiB)
    client.put_object(Bucket=bucket, Key="signed", Body=body)
    assert sent == [hashlib.sha256(body).hexdigest() if signed else "UNSIGNED-PAYLOAD"]
    assert client.get_object(Bucket=bucket, Key="signed")["Body"].read() == body


@pytest.mark.parametrize("endpoint, sign, signed", [
    ("https://minio.example.com", "auto", False), (None, "auto", False),
    ("http://minio.example.com", "auto", True), ("https://minio.example.com", "always", True),
])
def test_auto_signs_only_where_tls_does_not_guard_the_body(endpoint, sign, signed):
    settings = S3Settings.model_validate({"kind": "s3", "bucket": "train", "endpoint": endpoint, "sign_payload": sign})
    assert signs_payload(settings) is signed


def test_answers_keep_their_timestamps_as_text(moto_server, bucket):
    """No datetime is made of a GET's Last-Modified, nor of a listing's; other clients of the
    process (one made by boto3 itself) still get datetimes."""
    client = make_client(s3_settings(moto_server, bucket))
    client.put_object(Bucket=bucket, Key="stamped", Body=b"x")
    answer = client.get_object(Bucket=bucket, Key="stamped")
    assert answer["Body"].read() == b"x" and isinstance(answer["LastModified"], str)
    (entry,) = client.list_objects_v2(Bucket=bucket, Prefix="stamped")["Contents"]
    assert isinstance(entry["LastModified"], str)
    plain = boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1",
                         aws_access_key_id="k", aws_secret_access_key="s")
    assert not isinstance(plain.head_object(Bucket=bucket, Key="stamped")["LastModified"], str)
