"""Lightning reads a resumed checkpoint through this: a directory of kctl-train's sharded
format (checkpoint_format.py), or one `model.ckpt` as kctl-train wrote before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from . import checkpoint_format


class ShardedCheckpointIO(TorchCheckpointIO):  # type: ignore[misc]
    """Loads both formats; saving is never Lightning's (async_checkpoint.py)."""

    def load_checkpoint(
        self,
        path: Any,
        map_location: Callable[..., Any] | None = None,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        return checkpoint_format.load(Path(path))
