"""aifs.toml: defaults, the shipped example, and one clear error per kind of mistake."""

import json
import re
from collections import namedtuple
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from aifs.cli.config_cmd import config as config_cli
from aifs.config import (
    Config,
    ConfigError,
    Rule,
    default_config,
    format_size,
    load_config,
)
from aifs.config import system

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "aifs.example.toml"
MiB = 1 << 20
GiB = 1 << 30
DiskUsage = namedtuple("DiskUsage", "total used free")


def tier(kind: str, **keys: object) -> str:
    """One [[tiers]] table in TOML."""
    lines = [f"{key} = {json.dumps(str(value))}\n" for key, value in {"kind": kind, **keys}.items()]
    return "[[tiers]]\n" + "".join(lines)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aifs.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, state_dir=tmp_path / "state")
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    return message


@pytest.fixture
def fake_machine(tmp_path, monkeypatch):
    """Fixed memory and disk figures, so auto capacities are exact."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    8388608 kB\n")
    monkeypatch.setattr(system, "MEMINFO", meminfo)
    asked: list[Path] = []

    def disk_usage(path):
        asked.append(Path(path))
        return DiskUsage(total=1000 * GiB + 123, used=0, free=100 * GiB + 4567)

    monkeypatch.setattr(system, "disk_usage", disk_usage)
    return asked


# --- the default config ---------------------------------------------------------------


def test_default_config_has_three_auto_tiers_under_state_dir(tmp_path):
    cfg = default_config(tmp_path)
    assert cfg.volume.name == "default"
    assert cfg.volume.state_dir == tmp_path
    assert cfg.volume.block_size == 4 * MiB
    assert [(t.kind, t.capacity, t.path) for t in cfg.tiers] == [
        ("ram", None, None),
        ("nvme", None, None),
        ("objstore", None, None),
    ]
    assert cfg.tier_path(cfg.tiers[1]) == tmp_path / "nvme"
    assert cfg.tier_path(cfg.tiers[2]) == tmp_path / "objects"
    assert cfg.log_file() == tmp_path / "aifs.log"
    assert cfg.meta.shards == 8
    assert (cfg.fuse.allow_other, cfg.fuse.max_tasks, cfg.fuse.read_ahead_kb) == (True, 64, 1024)
    assert cfg.fuse.direct_writes
    assert cfg.logging.level == "info"
    assert cfg.rules == []


def test_default_state_dir_follows_volume_name_and_expands_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_config(None).volume.state_dir == tmp_path / ".local/share/aifs/default"
    cfg = load_config(write(tmp_path, '[volume]\nname = "train-01"\n'))
    assert cfg.volume.state_dir == tmp_path / ".local/share/aifs/train-01"


def test_state_dir_flag_beats_the_file_and_is_made_absolute(tmp_path, monkeypatch):
    path = write(tmp_path, '[volume]\nstate_dir = "/srv/aifs"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(path, state_dir=Path("flag-dir")).volume.state_dir == tmp_path / "flag-dir"
    assert load_config(path).volume.state_dir == Path("/srv/aifs")


def test_relative_paths_are_relative_to_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "conf" / "disk").mkdir(parents=True)
    path = tmp_path / "conf" / "aifs.toml"
    path.write_text(
        '[volume]\nstate_dir = "state"\n'
        + tier("nvme", path="disk")
        + tier("objstore")
        + '[logging]\nfile = "~/aifs.log"\n'
    )
    monkeypatch.chdir("/")
    monkeypatch.setenv("HOME", "/home/op")
    cfg = load_config(path)
    assert cfg.volume.state_dir == tmp_path / "conf" / "state"
    assert cfg.tier_path(cfg.tiers[0]) == tmp_path / "conf" / "disk"
    assert cfg.log_file() == Path("/home/op/aifs.log")


def test_sizes_accept_human_strings_and_bytes(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            '[volume]\nblock_size = 65536\n'
            + tier("ram", capacity="8GiB")
            + tier("nvme", capacity="1.5GiB")
            + '[[tiers]]\nkind = "objstore"\ncapacity = 1073741824\n',
        ),
        state_dir=tmp_path,
    )
    assert cfg.volume.block_size == 64 * 1024
    assert [cfg.capacity_of(t) for t in cfg.tiers] == [8 * GiB, 3 * GiB // 2, GiB]


def test_auto_capacities_come_from_the_machine_in_whole_blocks(tmp_path, fake_machine):
    cfg = default_config(tmp_path / "not" / "yet")
    ram, nvme, objstore = (cfg.capacity_of(t) for t in cfg.tiers)
    assert ram == 8 * GiB // 4  # a quarter of MemAvailable
    assert nvme == 50 * GiB  # half the free space, rounded down to 4 MiB blocks
    assert objstore == 1000 * GiB  # the whole filesystem
    assert set(fake_machine) == {tmp_path}  # measured at the nearest existing folder


@pytest.mark.parametrize("n", [65536, 65537, 4 * MiB, 3 * GiB // 2, 1 << 40, 10**9])
def test_format_size_parses_back_to_the_same_bytes(n):
    cfg = Config.model_validate(
        {
            "volume": {"block_size": "64KiB", "state_dir": "/s"},
            "tiers": [{"kind": "nvme", "capacity": format_size(n)}, {"kind": "objstore"}],
        }
    )
    assert cfg.tiers[0].capacity == n


def test_format_size_picks_the_largest_exact_unit():
    sizes = (4 * MiB, 1536 * MiB, 1 << 40, 1000)
    assert [format_size(n) for n in sizes] == ["4MiB", "1536MiB", "1TiB", "1000"]


# --- the shipped example ----------------------------------------------------------------


def test_example_config_is_the_defaults_plus_one_rule(tmp_path):
    example = load_config(EXAMPLE, state_dir=tmp_path)
    default = default_config(tmp_path)
    assert example.model_dump(exclude={"rules"}) == default.model_dump(exclude={"rules"})
    assert example.rules == [Rule(path="/checkpoints/**", durability="local")]


def models_in(tp: object) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [model for arg in get_args(tp) for model in models_in(arg)]


def test_example_config_shows_every_key():
    text = EXAMPLE.read_text()
    models, seen = [Config], []
    while models:
        model = models.pop()
        seen.append(model)
        for name, field in model.model_fields.items():
            shown = re.search(rf"^(\[+{name}\]+$|(# )?{name} = )", text, re.M)
            assert shown, f"{model.__name__}.{name} is missing from {EXAMPLE.name}"
            models += [m for m in models_in(field.annotation) if m not in seen + models]
    assert len(seen) == 16  # Config, volume, meta, five tier kinds, erasure, fuse, writeback, logging, metrics,
    # cluster, prefetch, rule


# --- one clear message per mistake -------------------------------------------------------

BAD_INPUTS = {
    "unknown top-level key": (
        '[volum]\nname = "x"\n',
        [
            "volum = {'name': 'x'}: unknown key",
            "did you mean 'volume'?",
            "allowed here: volume, meta, tiers, fuse, writeback, logging, rules",
        ],
    ),
    "unknown nested key": (
        "[fuse]\nallow_others = true\n",
        ["fuse.allow_others = true: unknown key", "did you mean 'allow_other'?"],
    ),
    "unknown key in a tier": (
        tier("ram", capcity="1GiB"),
        ["tiers[0].capcity = '1GiB': unknown key", "allowed here: kind, capacity, path"],
    ),
    "bad size string": (
        tier("ram") + tier("nvme", capacity="12XB") + tier("objstore"),
        ["tiers[1].capacity = '12XB': not a size; use bytes or a string like '8GiB'"],
    ),
    "block size not a power of two": (
        '[volume]\nblock_size = "3MiB"\n',
        ["volume.block_size = '3MiB': must be a power of two between 64KiB and 64MiB"],
    ),
    "block size too small": (
        "[volume]\nblock_size = 4096\n",
        ["volume.block_size = 4096: must be a power of two between 64KiB and 64MiB"],
    ),
    "size that is not a string or integer": (
        "[volume]\nblock_size = 1.5\n",
        ["volume.block_size = 1.5: not a size"],
    ),
    "objstore above nvme": (
        tier("objstore") + tier("nvme"),
        [
            "tiers[1].kind = 'nvme': listed below the objstore tier at tiers[0]",
            "in the order ram, nvme, objstore",
        ],
    ),
    "ram below nvme": (
        tier("nvme") + tier("ram") + tier("objstore"),
        ["tiers[1].kind = 'ram': listed below the nvme tier"],
    ),
    "two nvme tiers": (
        tier("nvme") + tier("nvme") + tier("objstore"),
        ["tiers[1].kind = 'nvme': a second nvme tier"],
    ),
    "no objstore tier": (
        tier("ram") + tier("nvme"),
        ["tiers = ['ram', 'nvme']: no objstore tier"],
    ),
    "no nvme tier": (
        tier("objstore"),
        ["tiers = ['objstore']: no nvme tier", "write-back staging"],
    ),
    "no tiers at all": ("tiers = []\n", ["tiers = []: no nvme tier"]),
    "ram tier with a path": (
        tier("ram", path="/tmp") + tier("nvme") + tier("objstore"),
        ["tiers[0].path = '/tmp': a ram tier has no path; remove the key"],
    ),
    "unknown tier kind": (
        tier("tape"),
        ["tiers[0].kind = 'tape': unknown kind; use one of 'ram', 'nvme', 'objstore'"],
    ),
    "tier without kind": (
        '[[tiers]]\ncapacity = "1GiB"\n',
        ["tiers[0].kind: required key is missing; use one of 'ram', 'nvme', 'objstore'"],
    ),
    "tiers as a table": (
        '[tiers]\nkind = "nvme"\n',
        ["tiers = {'kind': 'nvme'}: must be an array; write each entry as [[tiers]]"],
    ),
    "capacity below one block": (
        tier("ram", capacity="1MiB") + tier("nvme") + tier("objstore"),
        ["tiers[0].capacity = '1MiB': smaller than one block (volume.block_size = 4MiB)"],
    ),
    "volume name with a slash": (
        '[volume]\nname = "a/b"\n',
        ["volume.name = 'a/b': use only letters, digits, '.', '_' and '-'"],
    ),
    "shards out of range": (
        "[meta]\nshards = 0\n",
        ["meta.shards = 0: must be greater than or equal to 1"],
    ),
    "shards as a string": ('[meta]\nshards = "8"\n', ["meta.shards = '8': must be a whole number"]),
    "boolean as a string": (
        '[fuse]\nallow_other = "yes"\n',
        ["fuse.allow_other = 'yes': must be true or false"],
    ),
    "negative timeout": (
        "[fuse]\nattr_timeout = -1\n",
        ["fuse.attr_timeout = -1: must be greater than or equal to 0"],
    ),
    "read_ahead_kb too large": (
        "[fuse]\nread_ahead_kb = 65537\n",
        ["fuse.read_ahead_kb = 65537: must be less than or equal to 65536"],
    ),
    "answer board too small": (
        '[fuse]\nbypass_answers = "64KiB"\n',
        ["fuse.bypass_answers = '64KiB': use 0 (no shared answers) or a size from 1MiB to 16GiB"],
    ),
    "unknown log level": (
        '[logging]\nlevel = "verbose"\n',
        ["logging.level = 'verbose': must be 'debug', 'info', 'warning' or 'error'"],
    ),
    "rule glob not rooted": (
        '[[rules]]\npath = "checkpoints/**"\n',
        ["rules[0].path = 'checkpoints/**': must start with '/'"],
    ),
    "rule glob with bad range": (
        '[[rules]]\npath = "/c/[z-a]"\n',
        ["rules[0].path = '/c/[z-a]': not a valid glob"],
    ),
    "direct_writes not a boolean": (
        '[[rules]]\npath = "/c/**"\ndirect_writes = "yes"\n',
        ["rules[0].direct_writes = 'yes': must be true or false"],
    ),
    "more uploads beside writers than in all": (
        "[writeback]\nupload_concurrency = 4\nuploads_beside_writers = 5\n",
        ["uploads_beside_writers (5) is more than upload_concurrency (4)"],
    ),
    "rule pack_below above half a pack": (
        '[writeback]\npack_size = "4MiB"\n[[rules]]\npath = "/c/**"\npack_below = "3MiB"\n',
        ["rules[0].pack_below = '3MiB'", "at most half of [writeback] pack_size (4MiB)"],
    ),
    "unknown durability": (
        '[[rules]]\npath = "/c/**"\ndurability = "s3"\n',
        ["rules[0].durability = 's3': must be 'local', 'cluster' or 'remote'"],
    ),
    "TOML syntax error": (
        "[meta]\nshards = = 4\n",
        ["line 2, column 10: invalid TOML", "'shards = = 4'"],
    ),
    "TOML error at end of file": (
        "[meta]\nshards = [1,\n",
        ["line 2, column", "invalid TOML", "'shards = [1,'"],
    ),
}


@pytest.mark.parametrize("text, expected", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_names_key_and_value(tmp_path, text, expected):
    message = error_of(tmp_path, text)
    assert "\n" not in message
    for part in expected:
        assert part in message


def test_missing_directory_names_key_value_and_fix(tmp_path):
    missing = tmp_path / "no" / "such"
    message = error_of(tmp_path, tier("nvme", path=missing) + tier("objstore"))
    assert f"tiers[0].path = '{missing}': no such directory; create it or remove the key" in message


def test_tier_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    message = error_of(tmp_path, tier("nvme") + tier("objstore", path=tmp_path / "f"))
    expected = f"tiers[1].path = '{tmp_path / 'f'}': not a directory; use a directory or remove"
    assert expected in message


def test_existing_tier_directories_are_accepted(tmp_path):
    (tmp_path / "nvme0").mkdir()
    cfg = load_config(
        write(tmp_path, tier("nvme", path=tmp_path / "nvme0") + tier("objstore")),
        state_dir=tmp_path / "state",
    )
    assert cfg.tier_path(cfg.tiers[0]) == tmp_path / "nvme0"
    assert cfg.tier_path(cfg.tiers[1]) == tmp_path / "state" / "objects"
    with pytest.raises(ValueError):
        cfg.tier_path(default_config(tmp_path).tiers[0])  # ram


def test_unreadable_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="nope.toml: cannot read: No such file"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"name = '\xff'\n")
    with pytest.raises(ConfigError, match="bin.toml: not UTF-8"):
        load_config(bad)


# --- rules -------------------------------------------------------------------------------


def rules_config(*rules: tuple[str, str]) -> Config:
    return Config.model_validate({"rules": [{"path": p, "durability": d} for p, d in rules]})


@pytest.mark.parametrize(
    "glob, path, matches",
    [
        ("/checkpoints/**", "/checkpoints/run1/step100.pt", True),
        ("/checkpoints/**", "/checkpoints/a", True),
        ("/checkpoints/**", "/checkpointsX/a", False),
        ("/checkpoints/**", "/data/checkpoints/a", False),
        ("/checkpoints/*", "/checkpoints/a", True),
        ("/checkpoints/*", "/checkpoints/run1/a", False),
        ("/**/*.pt", "/model.pt", True),
        ("/**/*.pt", "/a/b/c/model.pt", True),
        ("/**/*.pt", "/a/b/model.pth", False),
        ("/ckpt/**/latest", "/ckpt/latest", True),
        ("/ckpt/**/latest", "/ckpt/x/y/latest", True),
        ("/ckpt/**/latest", "/ckpt/x/notlatest", False),
        ("/run?/x", "/run1/x", True),
        ("/run?/x", "/run/x", False),
        ("/run?/x", "/run//x", False),
        ("/shard[0-3].bin", "/shard2.bin", True),
        ("/shard[0-3].bin", "/shard7.bin", False),
        ("/shard[!0-3]", "/shard7", True),
        ("/a[!x]b", "/a/b", False),
        ("/a[b", "/a[b", True),
        ("/a.b", "/aXb", False),
        ("/**", "/anything/at/all", True),
    ],
)
def test_rule_globs(glob, path, matches):
    assert Rule(path=glob).matches(path) is matches


def test_rule_for_returns_first_match_else_default():
    cfg = rules_config(
        ("/checkpoints/final/**", "remote"), ("/checkpoints/**", "local"), ("/**/*.pt", "remote")
    )
    assert cfg.rule_for("/checkpoints/final/model.pt").path == "/checkpoints/final/**"
    assert cfg.rule_for("/checkpoints/step1/model.pt").durability == "local"
    assert cfg.rule_for("/models/llama.pt").durability == "remote"
    fallback = cfg.rule_for("/data/shard-0001.tar")
    assert (fallback.path, cfg.durability(fallback)) == ("/**", "local")  # one node, no flash servers


# --- CLI -------------------------------------------------------------------------------


def run_cli(*args: str):
    return CliRunner().invoke(config_cli, list(args))


def test_cli_check_good_file(tmp_path, fake_machine):
    result = run_cli("check", str(EXAMPLE), "--state-dir", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("\n") == 1
    assert f"ok: volume 'default', state dir {tmp_path}, block 4MiB" in result.stdout
    assert "ram 2.0 GiB (auto) > nvme 50.0 GiB (auto) > objstore 1000.0 GiB (auto)" in result.stdout
    assert result.stderr == ""


def test_cli_check_bad_file_exits_2_with_message_on_stderr(tmp_path):
    path = write(tmp_path, tier("ram") + tier("nvme", capacity="12XB") + tier("objstore"))
    result = run_cli("check", str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        f"aifs: {path}: tiers[1].capacity = '12XB': "
        "not a size; use bytes or a string like '8GiB', or 'auto'"
    )


def test_cli_check_missing_file_exits_2(tmp_path):
    result = run_cli("check", str(tmp_path / "absent.toml"))
    assert result.exit_code == 2
    assert "absent.toml: cannot read" in result.stderr


def test_cli_show_json_resolves_everything(tmp_path, fake_machine):
    result = run_cli("show", "--json", "--state-dir", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["volume"]["state_dir"] == str(tmp_path)
    assert data["tiers"] == [
        {"kind": "ram", "capacity": 2 * GiB},
        {"kind": "nvme", "capacity": 50 * GiB, "path": str(tmp_path / "nvme")},
        {"kind": "objstore", "capacity": 1000 * GiB, "path": str(tmp_path / "objects")},
    ]
    assert data["logging"]["file"] == str(tmp_path / "aifs.log")


def test_cli_show_toml_is_valid_toml_of_the_same_config(tmp_path, fake_machine):
    (tmp_path / "nvme").mkdir()
    (tmp_path / "objects").mkdir()
    result = run_cli("show", str(EXAMPLE), "--state-dir", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert 'capacity = "50GiB"  # auto' in result.stdout
    shown = write(tmp_path, result.stdout)
    again = load_config(shown)
    original = load_config(EXAMPLE, state_dir=tmp_path)
    assert again.volume == original.volume
    assert again.rules == original.rules
    capacities = [[cfg.capacity_of(t) for t in cfg.tiers] for cfg in (again, original)]
    assert capacities[0] == capacities[1]
    assert again.log_file() == original.log_file()
