"""Open a store from a URI: the storage section of a job, or a run root."""

from __future__ import annotations

from urllib.parse import urlparse

from ..errors import BadInput
from ..spec.k8s_names import label_problem, subdomain_problem
from .base import ObjectStore, StoreError
from .keys import join_key


def run_root(storage_uri: str, namespace: str, name: str) -> str:
    """`<storage.uri>/<namespace>/<name>/`: where one job's objects live. BadInput for a
    namespace or name the API server would refuse: only a valid one is one component of
    the store's path (`collect ../../etc --from URI` reads nothing outside the store)."""
    problem = label_problem(namespace, "namespace") or subdomain_problem(name, "job name")
    if problem:
        raise BadInput(problem)
    return storage_uri.rstrip("/") + "/" + join_key(namespace, name) + "/"


def open_store(
    uri: str,
    *,
    endpoint: str | None = None,
    region: str | None = None,
    concurrency: int = 8,
    patience: float | None = None,
) -> ObjectStore:
    """A store rooted at `uri` (s3://bucket/prefix/ or file:///path/). `patience`: how
    many seconds an S3 operation keeps retrying transient failures (s3.DEFAULT_PATIENCE)."""
    from ..spec.urls import credentials_problem  # the commands that only look never need it

    for url in (uri, endpoint or ""):
        problem = credentials_problem(url)
        if problem:
            raise BadInput(f"{url.split('@')[-1]}: {problem}")
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        from .file import FileStore

        return FileStore(parsed.path)
    if parsed.scheme == "s3":
        from .s3 import S3Store

        return S3Store(
            parsed.netloc,
            parsed.path.lstrip("/"),
            endpoint=endpoint,
            region=region,
            concurrency=concurrency,
            **({} if patience is None else {"patience": patience}),
        )
    raise StoreError(f"{uri}: unsupported store (use s3:// or file://)")
