#!/usr/bin/env bash
# Install the Debian packages named as PACKAGE:COMMAND (or PACKAGE:/file) pairs that are missing, where
# this machine can (root, apt-get); elsewhere say so: the tests that need them skip, saying why.
set -euo pipefail
missing=()
for pair in "$@"; do
    # PACKAGE:COMMAND, or PACKAGE:/path/of/a/file it installs
    what=${pair##*:}
    if [ "${what#/}" != "$what" ]; then
        [ -e "$what" ] || missing+=("${pair%%:*}")
    else
        command -v "$what" >/dev/null || missing+=("${pair%%:*}")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "not installing ${missing[*]} (needs root and apt-get): the tests that need them skip"
    exit 0
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
