"""The `aifs` command line."""
