"""Where a run's objects live: one rule for the runtime, the local backend and collect.

A run's root is `<storage.uri>/<namespace>/<name>/`; a job without spec.storage uses the
one default location, a directory under kctl-train's home (docs/STORAGE.md).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput
from ..spec.k8s_names import label_problem, subdomain_problem
from ..storage import ObjectStore, open_store
from ..storage.keys import join_key

if TYPE_CHECKING:
    from ..spec.model import TrainingJob

HOME_ENV = "KCTL_TRAIN_HOME"


def home() -> Path:
    """kctl-train's state directory: $KCTL_TRAIN_HOME, else ~/.kctl-train (in a pod
    without a home directory, under the temporary directory)."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured)
    try:
        return Path.home() / ".kctl-train"
    except RuntimeError:  # no $HOME and no passwd entry (an arbitrary container uid)
        return Path(tempfile.gettempdir()) / "kctl-train"


def run_root(storage_uri: str, namespace: str, name: str) -> str:
    """`<storage.uri>/<namespace>/<name>/`: where one job's objects live. BadInput for a
    namespace or name the API server would refuse: only a valid one is one component of
    the store's path (`collect ../../etc --from URI` reads nothing outside the store)."""
    problem = label_problem(namespace, "namespace") or subdomain_problem(name, "job name")
    if problem:
        raise BadInput(problem)
    return storage_uri.rstrip("/") + "/" + join_key(namespace, name) + "/"


def default_store_uri() -> str:
    """The store of a job without spec.storage: `<home>/store`."""
    return (home() / "store").resolve().as_uri()


def store_for(
    job: TrainingJob, *, concurrency: int = 8, patience: float | None = None
) -> ObjectStore:
    """The store rooted at this job's run root. `patience`: how long writes wait out an
    outage (None: the store's default)."""
    storage = job.spec.storage
    uri = storage.uri if storage else default_store_uri()
    root = run_root(uri, job.metadata.namespace, job.metadata.name)
    return open_store(
        root,
        endpoint=storage.endpoint if storage else None,
        region=storage.region if storage else None,
        concurrency=concurrency,
        patience=patience,
    )
