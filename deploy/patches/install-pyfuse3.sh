#!/usr/bin/env bash
# Build pyfuse3 with pyfuse3-3.5.0-aifs.patch and install it into the virtual environment $1.
#   bash deploy/patches/install-pyfuse3.sh /opt/aifs
#
# Released pyfuse3 does not pass file lock requests on, so the kernel keeps flock and fcntl
# locks per mount; patched, it hands them to aifs, which keeps them for every node of a shared
# volume. The patch also lets open and opendir replies carry FOPEN_NOFLUSH and FOPEN_CACHE_DIR,
# so read-only closes cost no request and listings can stay in the kernel, and it takes a
# request already queued on the FUSE device at once instead of first waiting for the device
# to be readable (a lock and a scheduler pass per request). A read reply is handed to the kernel
# without the GIL, so other threads run while the kernel copies it. The release's sdist is patched
# and built with Cython from PyPI (a build requirement of pyfuse3). The version is 3.5.0 with
# a local label naming the patch: aifs's pin `pyfuse3==3.5.0` is met, so a later
# `pip install .` keeps this build (and brings pyfuse3's own dependency, trio), and a venv
# that has this very build is left as it is.
set -euo pipefail

version=3.5.0
python="$1/bin/python"
patch_file="$(cd "$(dirname "$0")" && pwd)/pyfuse3-${version}-aifs.patch"
build="${version}+aifs.$(sha256sum "$patch_file" | cut -c1-12)"  # names the patch it was built with
installed="$("$python" -c 'from importlib.metadata import version; print(version("pyfuse3"))' 2>/dev/null || true)"
[ "$installed" = "$build" ] && exit 0

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$work" "pyfuse3==${version}"
tar -xzf "$work/pyfuse3-${version}.tar.gz" -C "$work"
source_dir="$work/pyfuse3-${version}"
patch -d "$source_dir" -p1 --quiet --forward < "$patch_file"
rm "$source_dir/src/pyfuse3/__init__.c"  # generated from the unpatched sources; Cython makes it anew
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYFUSE3="$build" \
    "$python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$source_dir"
