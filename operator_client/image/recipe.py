"""The Dockerfile of a workspace build: the user's code on a trainer image (pure).

The first step checks the base has the runtime, so a wrong `--base` fails in seconds with
its own message (MISSING_RUNTIME), before anything is copied."""

from __future__ import annotations

import json

from ..contract import RUNTIME_COMMAND
from ..kubeflow.security import RUN_AS_GROUP, RUN_AS_USER

# Bumped when the recipe's output changes for the same inputs: part of every tag.
RECIPE_VERSION = "1"
CONTEXT_DIR = "workspace"  # the staged files, beside the Dockerfile
WORKDIR = "/workspace"  # the trainer image's working directory
SOURCE_DIR = "/tmp/kctl-train-workspace"  # a package's source, removed once installed
MISSING_RUNTIME = "kctl-train-build: the base image has no kctl-train-runtime"


def dockerfile(base: str, kind: str, digest: str) -> str:
    """The Dockerfile for a workspace of `kind` ("package": pip installs it; "modules":
    copied to the working directory, on PYTHONPATH) on `base`."""
    runtime = RUNTIME_COMMAND[0]
    lines = [
        f"# Written by kctl-train build (recipe {RECIPE_VERSION}).",
        f"FROM {base}",
        "USER 0",
        f'RUN command -v {runtime} >/dev/null 2>&1 || {{ echo "{MISSING_RUNTIME}" >&2; exit 3; }}',
    ]
    if kind == "package":
        lines += [
            f"COPY {CONTEXT_DIR}/ {SOURCE_DIR}/",
            # --no-cache-dir: no wheel cache in the image; the source goes once installed.
            f"RUN pip install --no-cache-dir {SOURCE_DIR} && rm -rf {SOURCE_DIR} /root/.cache",
        ]
    else:
        lines += [f"COPY {CONTEXT_DIR}/ {WORKDIR}/", f"ENV PYTHONPATH={WORKDIR}"]
    lines += [
        f"WORKDIR {WORKDIR}",
        f'LABEL io.kctl-train.workspace="{digest}"',
        f"USER {RUN_AS_USER}:{RUN_AS_GROUP}",
        f"ENTRYPOINT {json.dumps(list(RUNTIME_COMMAND))}",
        "",
    ]
    return "\n".join(lines)
