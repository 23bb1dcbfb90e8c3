"""The C part of aifs, which pyproject.toml cannot yet declare in a stable form: the data socket
reader's per-file work (aifs/bypass/_reader.c), built against xxhash.h (Debian's libxxhash-dev).
Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("aifs.bypass._reader", ["aifs/bypass/_reader.c"], extra_compile_args=["-O2"])])
