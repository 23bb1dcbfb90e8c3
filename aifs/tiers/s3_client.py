"""The boto3 client of the S3 tier, configured for the endpoints it talks to (docs/s3-and-writeback.md)."""

from typing import Any

import boto3
import botocore.session
from botocore.config import Config as BotoConfig

from aifs.config.models import S3Tier as S3Settings


def make_client(settings: S3Settings) -> Any:
    """A thread-safe S3 client: one attempt per call (the tier retries), short timeouts,
    no checksums beyond what S3 requires (aifs verifies its own), bodies signed only
    where `signs_payload` says, one pooled connection per concurrent caller, timestamps
    in answers left as text."""
    secret = settings.secret_key.get_secret_value() if settings.secret_key else None
    session = boto3.session.Session(
        aws_access_key_id=settings.access_key, aws_secret_access_key=secret,
        region_name=settings.region, botocore_session=_timestamps_as_text(),
    )
    config = BotoConfig(
        s3={"addressing_style": settings.addressing, "payload_signing_enabled": signs_payload(settings)},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        max_pool_connections=settings.max_connections,
        retries={"total_max_attempts": 1},
    )
    return session.client("s3", endpoint_url=settings.endpoint, config=config,
                           verify=_verify(settings))


def _timestamps_as_text() -> botocore.session.Session:
    """A botocore session that leaves the timestamps of answers (every GET's Last-Modified)
    as the text S3 sent: aifs reads none of them, and parsing each into a datetime is a
    share of every request's CPU. Credential providers accept either form."""
    session = botocore.session.get_session()
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
    return session


def signs_payload(settings: S3Settings) -> bool:
    """Whether each request's signature covers a SHA-256 of its body: a third of the client's
    CPU for a 4 MiB PUT. "auto" signs over plain http only; over https TLS guards the body
    in transit, and aifs checks every block's own checksum when it comes back."""
    if settings.sign_payload == "auto":
        return not _https(settings)
    return settings.sign_payload == "always"


def _verify(settings: S3Settings) -> bool | None:
    """False for plain http, so no CA bundle (say a stale AWS_CA_BUNDLE) is ever loaded;
    None for https lets botocore use its usual chain, AWS_CA_BUNDLE included."""
    return None if _https(settings) and settings.verify_tls else False


def _https(settings: S3Settings) -> bool:
    return settings.endpoint is None or settings.endpoint.startswith("https://")
