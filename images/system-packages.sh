#!/usr/bin/env bash
# Install the Debian packages named as PACKAGE:COMMAND pairs whose command is missing, where
# this machine can (root, apt-get); elsewhere say so: the tests that need them skip, saying why.
set -euo pipefail
missing=()
for pair in "$@"; do
    command -v "${pair##*:}" >/dev/null || missing+=("${pair%%:*}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "not installing ${missing[*]} (needs root and apt-get): the tests that need them skip"
    exit 0
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
