"""The durable cold tier in an S3 bucket (AWS S3, MinIO, Ceph RGW), through boto3.

Block `id` is the object `<prefix><object_name(id)>`, e.g.
`volumes/train/ab/00000000000012ab`: the same relative layout as the local
object store, so one can be copied into the other as is, and the fan-out by the
id's low byte spreads keys over S3's per-prefix request-rate partitions. One
PUT per block (blocks are at most 64 MiB, far below S3's 5 GiB single-PUT limit).

Every request runs through a Retrier: transient failures are retried with
backoff, a circuit breaker stops waiting on an endpoint that keeps failing, and
whatever cannot be done raises OSError(EIO) naming the bucket, key and error, so
the uploader retries later and a reader gets EIO within a bounded time. With
`upload_process`, block PUTs go through a process of their own (s3_putter).
"""

import logging
import re
import threading
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from botocore.exceptions import ClientError

from aifs.config.models import S3Tier as S3Settings
from aifs.tiers.protocol import OneObjectPerBlock, object_name
from aifs.tiers.s3_client import make_client
from aifs.tiers.s3_marker import MARKER_NAME, MarkerMode, S3SetupError, VolumeMarker
from aifs.tiers.s3_putter import PutProcess, PutterFailed
from aifs.tiers.s3_retry import S3Error, error_code, retrier_for

T = TypeVar("T")
log = logging.getLogger(__name__)

_OBJECT_KEY = re.compile(r"[0-9a-f]{2}/([0-9a-f]{16})")
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})  # HEAD answers carry no error code
DELETE_BATCH = 1000  # the most objects one DeleteObjects request may name


class S3Tier(OneObjectPerBlock):
    name = "s3"
    used_is_exact = False  # see used()

    def __init__(self, settings: S3Settings, capacity: int, volume: VolumeMarker,
                 marker: MarkerMode = MarkerMode.CLAIM) -> None:
        """Connect and check that the bucket prefix belongs to `volume`, claiming it when `marker`
        allows (raises S3SetupError if it can't; `marker_missing` tells a CHECK that found none)."""
        self.bucket = settings.bucket
        self.prefix = settings.prefix
        self.capacity = capacity
        self._retrier = retrier_for(settings, announce=marker is not MarkerMode.CHECK)  # one-shot checks say it once
        self.breaker = self._retrier.breaker
        self._client = make_client(settings)
        self._putter = PutProcess(settings, self.breaker, volume.block_size) if settings.upload_process else None
        self._lock = threading.Lock()
        self._used = 0
        self.marker_missing = False
        self._claim(volume, settings, marker)

    # -- the tier protocol ---------------------------------------------------

    def get(self, block_id: int, demand: bool = False) -> bytes | None:
        return self._get(self._key(block_id))

    def get_range(self, block_id: int, offset: int, length: int, demand: bool = False) -> bytes | None:
        """`length` bytes from `offset` (fewer at the object's end), or None when it is absent."""
        if offset < 0 or length <= 0:
            raise ValueError(f"bad range: offset {offset}, length {length}")
        return self._get(self._key(block_id), Range=f"bytes={offset}-{offset + length - 1}")

    def put(self, block_id: int, data: bytes) -> None:
        key = self._key(block_id)
        if self._putter is None or not self._putter.fits(data) or not self._put_elsewhere(key, data):
            self._request("PUT", key, partial(
                self._client.put_object, Bucket=self.bucket, Key=key, Body=data,
            ))
        with self._lock:
            self._used += len(data)

    def _put_elsewhere(self, key: str, data: bytes) -> bool:
        """PUT through the upload process; False if it cannot start (the caller PUTs itself)."""
        assert self._putter is not None
        try:
            self._putter.put(key, data)
        except PutterFailed as exc:
            log.warning("%s; S3 PUTs run in the mount's process", exc)
            self._putter = None
            return False
        return True

    @property
    def upload_pid(self) -> int | None:
        """The process the PUTs run in, once started; None while they run in this one."""
        return None if self._putter is None else self._putter.pid

    def close(self) -> None:
        """Stop the upload process (after the PUTs it holds)."""
        if self._putter is not None:
            self._putter.close()

    def flush(self) -> None:
        """Nothing to do: a PUT that returned is durable."""

    def delete(self, block_id: int) -> None:
        key = self._key(block_id)
        self._request("DELETE", key, partial(self._client.delete_object, Bucket=self.bucket, Key=key))

    def delete_many(self, block_ids: list[int]) -> None:
        """One DeleteObjects request per 1,000 objects instead of a DELETE each."""
        for start in range(0, len(block_ids), DELETE_BATCH):
            keys = [self._key(b) for b in block_ids[start:start + DELETE_BATCH]]
            answer = self._request("DELETE", f"{keys[0]} and {len(keys) - 1} more", partial(
                self._client.delete_objects, Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True},
            ))
            errors = answer.get("Errors", ())
            if errors:
                first = errors[0]
                raise S3Error(f"DELETE s3://{self.bucket}/{first.get('Key')} failed: {first.get('Code')} "
                              f"{first.get('Message', '')} ({len(errors)} of {len(keys)} objects not deleted)",
                              first.get("Code", ""))

    def contains(self, block_id: int) -> bool:
        key = self._key(block_id)

        def head() -> bool:
            self._client.head_object(Bucket=self.bucket, Key=key)  # never ?versionId=null: some servers answer it with 400
            return True

        return self._request("HEAD", key, _missing_is(False, head))

    def used(self) -> int:
        """Bytes this process has uploaded. A bucket cannot be asked its size cheaply, and a
        DELETE does not say how big the object was; the metadata's usage counters are the
        volume's real figure."""
        return self._used

    def block_ids(self) -> list[int]:
        return list(self.block_sizes())

    def url(self, block_id: int | None = None) -> str:
        """Where an operator finds the tier, or one of its objects."""
        return f"s3://{self.bucket}/{self.prefix}" + ("" if block_id is None else object_name(block_id))

    def block_sizes(self) -> dict[int, int]:
        """Every block object under the prefix with its size (one LIST request per 1,000), for fsck and gc."""
        sizes: dict[int, int] = {}
        page_args: dict[str, str] = {}
        while True:
            page = self._request("LIST", self.prefix, partial(
                self._client.list_objects_v2, Bucket=self.bucket, Prefix=self.prefix, **page_args,
            ))
            for entry in page.get("Contents", ()):
                match = _OBJECT_KEY.fullmatch(entry["Key"][len(self.prefix):])
                if match:
                    sizes[int(match.group(1), 16)] = entry["Size"]
            if not page.get("IsTruncated"):
                return sizes
            page_args = {"ContinuationToken": page["NextContinuationToken"]}

    # -- requests ------------------------------------------------------------

    def _key(self, block_id: int) -> str:
        return self.prefix + object_name(block_id)

    def _get(self, key: str, **extra: str) -> bytes | None:
        def fetch() -> bytes:
            response = self._client.get_object(Bucket=self.bucket, Key=key, **extra)
            return response["Body"].read()  # inside the attempt: a cut-off body is retried

        return self._request("GET", key, _missing_is(None, fetch))

    def _request(self, op: str, key: str, request: Callable[[], T]) -> T:
        """Run one operation with retries; every failure becomes an S3Error naming the object."""
        return self._retrier.run(f"{op} s3://{self.bucket}/{key}", request)

    # -- the volume marker -----------------------------------------------------

    def _claim(self, ours: VolumeMarker, settings: S3Settings, mode: MarkerMode) -> None:
        """Check the prefix's volume marker, writing it on first use (see s3_marker)."""
        endpoint = settings.endpoint or "AWS S3"
        where = f"s3://{self.bucket}/{self.prefix} at {endpoint}"
        key = self.prefix + MARKER_NAME
        try:
            raw = self._get(key)
        except S3Error as exc:
            if exc.code != "NoSuchBucket" or mode is MarkerMode.CHECK:
                raise
            if not settings.create_bucket:
                raise S3SetupError(
                    f"bucket {self.bucket!r} does not exist at {endpoint}; create it "
                    f"(for example: aws s3 mb s3://{self.bucket}) or set create_bucket = true "
                    "in the s3 tier of the config"
                ) from None
            self._create_bucket(settings.region)
            raw = None
        if raw is None:
            raw = self._without_marker(mode, key, ours, where)
        if raw is not None:
            VolumeMarker.parse(raw, where).check_owner(ours, where)

    def _without_marker(self, mode: MarkerMode, key: str, ours: VolumeMarker, where: str) -> bytes | None:
        """The prefix has no marker: claim it, refuse it, or (CHECK) only note it."""
        if mode is MarkerMode.CHECK:
            self.marker_missing = True
            return None
        if mode is MarkerMode.EXPECT:
            raise S3SetupError(
                f"{where} holds no aifs volume marker, but this volume's metadata refers to file "
                "data stored there: the bucket was emptied, or the endpoint, bucket or prefix is "
                "not this volume's. Check them; to mount anyway (files whose blocks are gone will "
                "give EIO, and aifs fsck lists them), pass --accept-missing-marker"
            )
        return self._write_marker(key, ours)

    def _write_marker(self, key: str, ours: VolumeMarker) -> bytes:
        """Create the marker unless another mount just did (a conditional PUT); returns the
        marker now in place, which is the other mount's if it won the race."""
        body = ours.dump()
        try:
            self._request("PUT", key, partial(
                self._client.put_object, Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*",
            ))
        except S3Error as exc:
            if exc.code != "PreconditionFailed":
                raise
            return self._get(key) or b""
        return body

    def _create_bucket(self, region: str) -> None:
        where = {} if region == "us-east-1" else {
            "CreateBucketConfiguration": {"LocationConstraint": region},
        }
        try:
            self._request("CREATE", "", partial(
                self._client.create_bucket, Bucket=self.bucket, **where,
            ))
        except S3Error as exc:
            if exc.code != "BucketAlreadyOwnedByYou":
                raise


def _missing_is(default: T, request: Callable[[], T]) -> Callable[[], T]:
    """`request`, answering `default` when S3 says the object does not exist."""

    def call() -> T:
        try:
            return request()
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return default
            raise

    return call
