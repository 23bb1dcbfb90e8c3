"""The `aifs` command imports a sub-command's module only when that command is used."""

import subprocess
import sys

from click.testing import CliRunner

from aifs.cli.main import COMMANDS, cli

HEAVY = ("boto3", "rocksdict", "pyfuse3", "trio")


def test_status_and_sync_do_not_import_the_storage_stack():
    """Run in a fresh interpreter: this test process has imported everything already."""
    probe = ("import sys; from click.testing import CliRunner; from aifs.cli.main import cli; "
             "assert CliRunner().invoke(cli, ['status', '--help']).exit_code == 0; "
             "assert CliRunner().invoke(cli, ['sync', '--help']).exit_code == 0; "
             f"print([m for m in {HEAVY!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_command_resolves_and_help_lists_them_all():
    for name in COMMANDS:
        assert cli.get_command(None, name).name == name
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == sorted(COMMANDS)
    assert CliRunner().invoke(cli, ["no-such-command"]).exit_code == 2
