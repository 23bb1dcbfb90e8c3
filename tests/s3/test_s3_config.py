"""The s3 tier's keys in aifs.toml: defaults, resolved values, and one clear message per mistake."""

import pytest

from aifs.config import ConfigError, load_config
from aifs.config.models import PiB

NVME = '[[tiers]]\nkind = "nvme"\n'


def s3_table(**keys: object) -> str:
    """One s3 [[tiers]] table; values are TOML text."""
    keys = {"kind": '"s3"', "bucket": '"train"', **keys}
    return "[[tiers]]\n" + "".join(f"{key} = {value}\n" for key, value in keys.items())


def load(tmp_path, text: str):
    path = tmp_path / "aifs.toml"
    path.write_text(text)
    return load_config(path, state_dir=tmp_path / "state")


def error_of(tmp_path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value)


def test_defaults_for_aws(tmp_path):
    cfg = load(tmp_path, NVME + s3_table())
    s3 = cfg.tiers[-1]
    assert (s3.endpoint, s3.bucket, s3.prefix, s3.region) == (None, "train", "", "us-east-1")
    assert s3.addressing == "auto"
    assert (s3.access_key, s3.secret_key) == (None, None)
    assert (s3.max_connections, s3.connect_timeout, s3.read_timeout, s3.retries) == (16, 5.0, 30.0, 5)
    assert (s3.verify_tls, s3.sign_payload, s3.create_bucket) == (True, "auto", False)
    assert s3.upload_process is False
    assert (s3.breaker_failures, s3.breaker_cooldown) == (5, 10.0)
    assert cfg.capacity_of(s3) == PiB


def test_every_key_set(tmp_path):
    cfg = load(tmp_path, '[[tiers]]\nkind = "ram"\ncapacity = "1GiB"\n' + NVME + s3_table(
        capacity='"100TiB"', endpoint='"https://minio.example.com:9000/"', prefix='"volumes/train/"',
        region='"eu-west-1"', addressing='"virtual"', access_key='"AK"', secret_key='"SK"',
        max_connections=64, connect_timeout=1, read_timeout=2.5, retries=0, verify_tls="false",
        sign_payload='"always"', upload_process="true", create_bucket="true", breaker_failures=3,
        breaker_cooldown=0.5,
    ))
    s3 = cfg.tiers[-1]
    assert s3.endpoint == "https://minio.example.com:9000"
    assert (s3.prefix, s3.region, s3.addressing) == ("volumes/train/", "eu-west-1", "virtual")
    assert (s3.access_key, s3.secret_key.get_secret_value()) == ("AK", "SK")
    assert (s3.max_connections, s3.connect_timeout, s3.read_timeout, s3.retries) == (64, 1.0, 2.5, 0)
    assert (s3.verify_tls, s3.sign_payload, s3.create_bucket) == (False, "always", True)
    assert s3.upload_process is True
    assert (s3.breaker_failures, s3.breaker_cooldown) == (3, 0.5)
    assert cfg.capacity_of(s3) == 100 << 40


def test_an_endpoint_means_path_style_addressing(tmp_path):
    s3 = load(tmp_path, NVME + s3_table(endpoint='"http://127.0.0.1:9000"')).tiers[-1]
    assert s3.addressing == "path"


def test_the_secret_is_not_shown(tmp_path):
    cfg = load(tmp_path, NVME + s3_table(access_key='"AK"', secret_key='"hunter2"'))
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg.model_dump(mode="json"))


BAD = {
    "no bucket": (NVME + '[[tiers]]\nkind = "s3"\n', "tiers[1].bucket: required key is missing"),
    "bad bucket name": (
        NVME + s3_table(bucket='"My_Bucket"'),
        "tiers[1].bucket = 'My_Bucket': not an S3 bucket name; use 3 to 63 lowercase letters",
    ),
    "endpoint without scheme": (
        NVME + s3_table(endpoint='"127.0.0.1:9000"'),
        "tiers[1].endpoint = '127.0.0.1:9000': must be an http:// or https:// URL",
    ),
    "endpoint with a path": (
        NVME + s3_table(endpoint='"http://host/bucket"'),
        "tiers[1].endpoint = 'http://host/bucket': must be an http:// or https:// URL "
        "with a host and no path",
    ),
    "prefix without trailing slash": (
        NVME + s3_table(prefix='"volumes/train"'),
        "tiers[1].prefix = 'volumes/train': must be empty, or end with '/'",
    ),
    "prefix with leading slash": (
        NVME + s3_table(prefix='"/volumes/"'),
        "tiers[1].prefix = '/volumes/': must be empty, or end with '/' and not start with it",
    ),
    "unknown addressing": (
        NVME + s3_table(addressing='"dns"'),
        "tiers[1].addressing = 'dns': must be 'path', 'virtual' or 'auto'",
    ),
    "access key alone": (
        NVME + s3_table(access_key='"AK"'),
        "tiers[1].access_key = 'AK': set without secret_key; "
        "set both, or neither to use the standard AWS chain",
    ),
    "secret key alone": (
        NVME + s3_table(secret_key='"SK"'),
        "tiers[1].secret_key = '**********': set without access_key",
    ),
    "empty access key": (
        NVME + s3_table(access_key='""', secret_key='"SK"'),
        "tiers[1].access_key = '': must not be empty; remove the key to use the default",
    ),
    "zero connections": (
        NVME + s3_table(max_connections=0),
        "tiers[1].max_connections = 0: must be greater than or equal to 1",
    ),
    "timeout as a string": (
        NVME + s3_table(read_timeout='"30s"'),
        "tiers[1].read_timeout = '30s': must be a number",
    ),
    "zero timeout": (
        NVME + s3_table(connect_timeout=0),
        "tiers[1].connect_timeout = 0: must be greater than 0",
    ),
    "negative retries": (
        NVME + s3_table(retries=-1), "tiers[1].retries = -1: must be greater than or equal to 0",
    ),
    "verify_tls as a string": (
        NVME + s3_table(verify_tls='"no"'), "tiers[1].verify_tls = 'no': must be true or false",
    ),
    "sign_payload as a boolean": (
        NVME + s3_table(sign_payload="true"),
        "tiers[1].sign_payload = true: must be 'auto', 'always' or 'never'",
    ),
    "upload_process as a string": (
        NVME + s3_table(upload_process='"yes"'), "tiers[1].upload_process = 'yes': must be true or false",
    ),
    "zero breaker threshold": (
        NVME + s3_table(breaker_failures=0),
        "tiers[1].breaker_failures = 0: must be greater than or equal to 1",
    ),
    "infinite cooldown": (
        NVME + s3_table(breaker_cooldown="inf"),
        "tiers[1].breaker_cooldown = inf: must be a finite number",
    ),
    "a path on an s3 tier": (
        NVME + s3_table(path='"/tmp"'),
        "tiers[1].path = '/tmp': an s3 tier has no path; its blocks live under bucket and prefix",
    ),
    "misspelt key": (
        NVME + s3_table(bucket_name='"x"'),
        "tiers[1].bucket_name = 'x': unknown key; did you mean 'bucket'?",
    ),
    "both objstore and s3": (
        NVME + '[[tiers]]\nkind = "objstore"\n' + s3_table(),
        "tiers[2].kind = 's3': a second durable tier below the objstore tier at tiers[1]; "
        "list exactly one of objstore and s3",
    ),
    "s3 above nvme": (
        s3_table() + NVME,
        "tiers[1].kind = 'nvme': listed below the s3 tier at tiers[0]; "
        "tiers go top to bottom in the order ram, nvme, objstore (or s3)",
    ),
    "no durable tier": (
        NVME, "tiers = ['nvme']: no objstore tier and no s3 tier; list exactly one of them",
    ),
    "unknown kind lists s3": (
        '[[tiers]]\nkind = "tape"\n', "use one of 'ram', 'nvme', 'objstore', 's3'",
    ),
    "capacity below one block": (
        NVME + s3_table(capacity='"1MiB"'),
        "tiers[1].capacity = '1MiB': smaller than one block",
    ),
}


@pytest.mark.parametrize("text, expected", BAD.values(), ids=BAD.keys())
def test_bad_values_name_key_value_and_what_is_allowed(tmp_path, text, expected):
    message = error_of(tmp_path, text)
    assert expected in message, message
