#!/usr/bin/env bash
# Install aifs and what it needs on a Debian machine, as root.
#   bash deploy/install.sh          the filesystem and its CLI
#   bash deploy/install.sh --test   also the test tools (pytest, hypothesis, moto, torch) and the
#                                   programs the tests run (git, tar, attr, fincore, setpriv, redis-server),
#                                   and builds the C part in this checkout, whose code the tests run
#
# aifs goes into its own virtual environment made with Debian's /usr/bin/python3 (which
# refuses system-wide pip installs), /opt/aifs by default or $AIFS_PREFIX; `aifs` is linked
# into /usr/local/bin. The install is a copy, not a link to this checkout: another checkout
# running this script later replaces it instead of silently changing what `aifs` runs.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${AIFS_PREFIX:-/opt/aifs}"
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# python3-venv + python3-dev: the virtual environment and the headers pyfuse3 builds against;
# fuse3: fusermount3 and /dev/fuse setup; libfuse3-dev + pkg-config + gcc + patch: pyfuse3's build,
# patched to pass file locks on to aifs (deploy/patches);
# python3-pyverbs: RDMA verbs for the flash tier, used when a device is present (aifs.rdma.device
# loads Debian's copy, which is built for this same /usr/bin/python3);
# attr, git, tar, diffutils, procps, util-linux: real programs the tests run on the mount;
# libxxhash-dev: the header the C part of aifs (aifs/bypass/_reader.c) hashes with;
# redis-server: the shared metadata engine's tests run real servers, replicas and sentinels.
packages=(python3 python3-venv python3-dev fuse3 libfuse3-dev libxxhash-dev pkg-config gcc patch python3-pyverbs)
[ -n "$extras" ] && packages+=(attr git tar diffutils procps util-linux redis-server)
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null

/usr/bin/python3 -m venv "$prefix"
bash deploy/patches/install-pyfuse3.sh "$prefix"
"$prefix/bin/python" -m pip install -q --disable-pip-version-check ".${extras}"
if [ -n "$extras" ]; then  # the tests run this checkout's own code: its C part is built here too
    "$prefix/bin/python" setup.py -q build_ext --inplace
fi
ln -sf "$prefix/bin/aifs" /usr/local/bin/aifs

# mount(8) runs /sbin/mount.fuse.aifs for fstab lines and `mount -t fuse.aifs` (/sbin is
# /usr/sbin on Debian); the systemd units go in only where systemd is, and are never started.
install_with_path() {  # FILE DEST MODE: FILE with @AIFS@ replaced by the installed command
    sed "s|@AIFS@|$prefix/bin/aifs|g" "$1" > "$2.tmp" && chmod "$3" "$2.tmp" && mv "$2.tmp" "$2"
}
install_with_path deploy/mount.fuse.aifs /usr/sbin/mount.fuse.aifs 755
if command -v systemctl >/dev/null; then
    for unit in deploy/systemd/*.service; do
        install_with_path "$unit" "/etc/systemd/system/$(basename "$unit")" 644
    done
    if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
fi
echo "aifs installed in $prefix; $(/usr/local/bin/aifs --version)"
