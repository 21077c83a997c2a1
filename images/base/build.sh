#!/usr/bin/env bash
# Build a local base image for the trainer where no registry can be reached: Debian bookworm
# made with debootstrap (Python 3.11), a virtual environment in /opt/venv first on PATH
# (Debian's own python refuses pip installs, PEP 668), and CPU torch in it. Committed with
# buildah as $BASE; nothing is done when $BASE exists already.
#
#   images/base/build.sh            (as root; needs debootstrap and buildah)
#
# pip inside the new root uses this machine's pip configuration (pip.conf files, PIP_*
# variables and the local wheel or index directories they name), so a mirror, a wheel
# cache or a private CA configured here works there too.
set -euo pipefail
# shellcheck source=../pip-config.sh
source "$(dirname "$0")/../pip-config.sh"

BASE=${BASE:-localhost/kctl-train/base:bookworm-torch2.13.0}
TORCH=${TORCH:-torch==2.13.0}
SUITE=${SUITE:-bookworm}

if buildah inspect --type image "$BASE" >/dev/null 2>&1; then
    echo "base image $BASE exists"
    exit 0
fi
# The Debian mirror apt uses here (deb822 or one-line sources), else the default one.
MIRROR=$(
    { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
      grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}'; } | grep -v security | head -n1 || true
)
MIRROR=${MIRROR:-http://deb.debian.org/debian}

ROOTFS=$(mktemp -d /var/tmp/kctl-train-base.XXXXXX)
MOUNTS=()
cleanup() {
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[i]}" 2>/dev/null || true; done
    rm -rf "$ROOTFS"
}
trap cleanup EXIT
bind() {  # bind this machine's $1 read-only at the same path in the new root
    if [ -d "$1" ]; then
        mkdir -p "$ROOTFS$1"
    else
        mkdir -p "$(dirname "$ROOTFS$1")" && touch "$ROOTFS$1"
    fi
    mount --bind "$1" "$ROOTFS$1"
    mount -o remount,bind,ro "$ROOTFS$1"
    MOUNTS+=("$ROOTFS$1")
}

start=$SECONDS
echo "debootstrap $SUITE from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,passwd \
    "$SUITE" "$ROOTFS" "$MIRROR" >/dev/null
echo "  done in $((SECONDS - start)) s"
# A private CA in front of the package index: the image trusts what this machine trusts.
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
mount -t proc proc "$ROOTFS/proc"
MOUNTS+=("$ROOTFS/proc")
for path in $(pip_paths); do
    bind "$path"
done
chroot "$ROOTFS" python3 -m venv /opt/venv
echo "pip install $TORCH"
env $(env | grep -E '^PIP_' | tr '\n' ' ') chroot "$ROOTFS" /opt/venv/bin/pip install \
    --no-cache-dir --quiet "$TORCH"
for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[i]}"; done
MOUNTS=()
rm -rf "$ROOTFS/root/.cache"
echo "  done in $((SECONDS - start)) s"

container=$(buildah from scratch)
mountpoint=$(buildah mount "$container")
cp -a "$ROOTFS/." "$mountpoint/"
buildah umount "$container" >/dev/null
buildah config \
    --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/bash "$container"
buildah commit --quiet --rm "$container" "$BASE" >/dev/null
echo "base image $BASE built in $((SECONDS - start)) s"
