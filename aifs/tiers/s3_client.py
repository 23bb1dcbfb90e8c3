"""The boto3 client of the S3 tier, configured as DESIGN section 8 measured it should be."""

from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from aifs.config.models import S3Tier as S3Settings


def make_client(settings: S3Settings) -> Any:
    """A thread-safe S3 client: one attempt per call (the tier retries), short timeouts,
    no checksums beyond what S3 requires (aifs verifies its own), one pooled connection
    per concurrent caller."""
    secret = settings.secret_key.get_secret_value() if settings.secret_key else None
    session = boto3.session.Session(
        aws_access_key_id=settings.access_key, aws_secret_access_key=secret,
        region_name=settings.region,
    )
    config = BotoConfig(
        s3={"addressing_style": settings.addressing},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        max_pool_connections=settings.max_connections,
        retries={"total_max_attempts": 1},
    )
    return session.client("s3", endpoint_url=settings.endpoint, config=config,
                           verify=_verify(settings))


def _verify(settings: S3Settings) -> bool | None:
    """False for plain http, so no CA bundle (say a stale AWS_CA_BUNDLE) is ever loaded;
    None for https lets botocore use its usual chain, AWS_CA_BUNDLE included."""
    https = settings.endpoint is None or settings.endpoint.startswith("https://")
    return None if https and settings.verify_tls else False
