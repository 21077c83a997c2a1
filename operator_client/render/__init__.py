"""Pure rendering of a TrainingJob into its manifest (a PyTorchJob, or a TrainJob when
spec.operator says so), and its text forms.

`render` and `spec_hash` are imported on first use (they load the spec model); the text
forms are cheap.
"""

from typing import TYPE_CHECKING, Any

from .output import to_json, to_yaml, to_yaml_stream

if TYPE_CHECKING:
    from ..spec.document import spec_hash
    from .manifest import render, render_admitted

__all__ = ["render", "render_admitted", "spec_hash", "to_json", "to_yaml", "to_yaml_stream"]


def __getattr__(name: str) -> Any:
    if name in ("render", "render_admitted"):
        from . import manifest

        return getattr(manifest, name)
    if name == "spec_hash":
        from ..spec.document import spec_hash

        return spec_hash
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
