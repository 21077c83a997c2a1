"""Open a store from a URI: the storage section of a job, or a run root
(runstore/location.py says where a run's root is)."""

from __future__ import annotations

from urllib.parse import urlparse

from ..errors import BadInput
from .base import ObjectStore, StoreError


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
