"""kctl-train: render, run and collect distributed Lightning training on Kubeflow."""

__version__ = "0.1.0"
