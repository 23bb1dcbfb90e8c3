from aifs.cli.main import cli

cli()
