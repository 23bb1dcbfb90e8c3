#!/usr/bin/env bash
# Install aifs and what it needs on a Debian machine, as root.
#   bash deploy/install.sh          the filesystem and its CLI
#   bash deploy/install.sh --test   also the test tools (pytest, hypothesis, git for the program tests)
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# fuse3: fusermount3 and /dev/fuse setup; libfuse3-dev + pkg-config + gcc: pyfuse3 builds against them;
# attr, git, tar, diffutils: real programs the tests run on the mount.
apt-get install -y -qq --no-install-recommends \
    fuse3 libfuse3-dev pkg-config gcc attr git tar diffutils procps >/dev/null

python3 -m pip install -q --disable-pip-version-check -e ".${extras}"
