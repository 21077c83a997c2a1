"""The one piece of collecting that needs torch, given to collect/results.py: a sharded
checkpoint consolidated into one file (runtime/checkpoint_format.py, which refuses what a
pod could have forged)."""

from __future__ import annotations

from pathlib import Path

from ..collect.collect import CollectError
from ..errors import BadInput


def consolidate_with_torch(directory: Path, target: Path) -> Path:
    """The sharded checkpoint in `directory` as the one file `target`. BadInput without
    torch; CollectError, naming it, for a checkpoint that is not safe to read."""
    try:
        from ..runtime.checkpoint_format import UnsafeCheckpoint, consolidate
    except ImportError:
        raise BadInput(
            "--consolidate reads the checkpoint with torch, which is not installed here: "
            "pip install 'kctl-train[runtime]'"
        ) from None
    try:
        return consolidate(directory, target)
    except UnsafeCheckpoint as exc:
        raise CollectError(f"--consolidate: {directory}: {exc}") from None
