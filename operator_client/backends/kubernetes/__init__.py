"""The Kubernetes backend: the only package that imports the `kubernetes` client."""

from .backend import KubernetesBackend

__all__ = ["KubernetesBackend"]
