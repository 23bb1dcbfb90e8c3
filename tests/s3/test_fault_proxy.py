"""aifs talking to S3 through a proxy that resets connections, cuts requests and responses
short, and delays or stalls responses at random: a write/read workload of tens of MiB still
ends with every byte right, read back from the bucket through the same proxy."""

import copy
import os

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from .conftest import MotoServer
from .faultproxy import Faults, FaultProxy
from .helpers_mount import (
    MiB, assert_digests, make_s3_volume, sha256_file, sync_wait, write_random,
)

__all__ = ["make_s3_volume"]  # the fixture, imported so pytest finds it

FILES = 6
FILE_SIZE = 8 * MiB
# Every kind of fault, often; bounded so that retries always get through in the end.
FAULTS = Faults(seed=20240601, reset=0.2, cut_request=0.05, cut_response=0.05, delay=0.2,
                max_delay=0.2, stall=0.02, stall_s=2.0, max_faults=100)
# Retries outlast the faults; the breaker must not count a flaky network as S3 being down.
S3_KEYS = {"connect_timeout": 1.0, "read_timeout": 1.0, "retries": 8, "breaker_failures": 50}


def client_via(server: MotoServer, proxy: FaultProxy):
    """moto's plain boto3 client (one attempt per call), pointed at the proxy."""
    through = copy.copy(server)
    through.endpoint = proxy.endpoint
    return through.client()


# -- the proxy itself --------------------------------------------------------------------------


def test_proxy_relays_bytes_unchanged_without_faults(moto_server, bucket):
    data = os.urandom(3 * MiB + 17)
    with FaultProxy(moto_server.port, Faults()) as proxy:
        client = client_via(moto_server, proxy)
        client.put_object(Bucket=bucket, Key="k", Body=data)
        assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == data
    assert proxy.counts.total() == 0 and proxy.connections >= 1


@pytest.mark.parametrize("faults, kind", [
    (Faults(reset=1.0, max_faults=2), "reset"),
    (Faults(cut_response=1.0, cut_within=1000, max_faults=2), "cut-response"),
])
def test_proxy_faults_happen_and_stop_at_their_bound(moto_server, bucket, faults, kind):
    data = os.urandom(MiB)
    moto_server.client().put_object(Bucket=bucket, Key="k", Body=data)
    with FaultProxy(moto_server.port, faults) as proxy:
        client = client_via(moto_server, proxy)
        failures = 0
        for _ in range(faults.max_faults):
            with pytest.raises((BotoCoreError, ClientError)):
                client.get_object(Bucket=bucket, Key="k")["Body"].read()
            failures += 1
        assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == data
    assert proxy.counts == {kind: faults.max_faults} and failures == faults.max_faults


# -- aifs through the proxy --------------------------------------------------------------------


@pytest.mark.timeout_s(150)
@pytest.mark.parametrize("upload_process", [False, True])  # PUTs from the mount, or from its child
def test_workload_through_a_faulty_network_keeps_every_byte(make_s3_volume, moto_server, bucket, upload_process):
    with FaultProxy(moto_server.port, FAULTS) as proxy:
        keys = S3_KEYS | {"upload_process": upload_process}
        volume = make_s3_volume(proxy.endpoint, bucket, s3=keys, writeback={"garbage_grace": 0})
        volume.mount()
        (volume.path / "data").mkdir()
        names = [f"data/part{i}.bin" for i in range(FILES)]
        digests = {name: write_random(volume.path / name, FILE_SIZE) for name in names}
        sync_wait(volume.path)
        # overwrite half of one file: its old blocks are retired and deleted through the proxy
        digests[names[0]] = write_random(volume.path / names[0], FILE_SIZE // 2)
        assert sha256_file(volume.path / names[1]) == digests[names[1]]
        sync_wait(volume.path)

        volume.reload_from_s3()
        assert_digests(volume.path, digests)
        volume.reload_from_s3()  # and a second pass, with other faults on other requests
        assert_digests(volume.path, digests)
        volume.umount()
    print(f"faults injected on {proxy.connections} connections: {dict(proxy.counts)}")
    assert len(proxy.counts) == 5 and proxy.counts.total() >= 20, proxy.counts  # every kind, often
