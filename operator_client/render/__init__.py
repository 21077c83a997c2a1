"""Pure rendering of a TrainingJob into the PyTorchJob manifest, and its text forms."""

from .output import to_json, to_yaml, to_yaml_stream
from .pytorchjob import render, spec_hash

__all__ = ["render", "spec_hash", "to_json", "to_yaml", "to_yaml_stream"]
