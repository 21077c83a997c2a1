"""kctl-train: render, run and collect distributed Lightning training on Kubeflow.

    from operator_client import Client

`Client` is imported on first use, so the CLI and the runtime pay nothing for it.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Client

from .version import __version__

__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(f"module 'operator_client' has no attribute {name!r}")
