#!/usr/bin/env bash
# Build the trainer image (images/trainer/Dockerfile) as $IMAGE:
# - with `docker build` where a Docker engine answers (BASE: the Dockerfile's default);
# - else with buildah (daemonless, chroot isolation) from a base built locally when no
#   registry can be reached (images/base/build.sh; cached as a buildah image).
# Run as root from anywhere: `make image` does, after installing buildah and debootstrap.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=pip-config.sh
source images/pip-config.sh
IMAGE=${IMAGE:-localhost/kctl-train/trainer:dev}
start=$SECONDS
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker build -f images/trainer/Dockerfile ${BASE:+--build-arg "BASE=$BASE"} -t "$IMAGE" .
else
    BASE=${BASE:-localhost/kctl-train/base:bookworm-torch2.13.0}
    BASE=$BASE images/base/build.sh
    volumes=()
    for path in $(pip_paths); do
        volumes+=(--volume "$path:$path:ro")
    done
    previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
    buildah bud --quiet --isolation chroot --network host --layers --force-rm \
        --build-arg "BASE=$BASE" "${volumes[@]}" \
        -f images/trainer/Dockerfile -t "$IMAGE" . >/dev/null
    # The image it replaces (1.6 GB): gone, unless a container still uses it.
    current=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE")
    if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
        buildah rmi "$previous" >/dev/null 2>&1 || true
    fi
fi
echo "image $IMAGE built in $((SECONDS - start)) s"
