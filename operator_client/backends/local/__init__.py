"""The local backend: a rendered PyTorchJob as processes on this machine."""

from .backend import LocalBackend

__all__ = ["LocalBackend"]
