"""Many objects at once: parallel downloads over one store (collect's transfer engine).

Small objects are fetched concurrently on a thread pool; a large object is split into
ranged parts by the store's own transfer config (S3). Each file is written beside its
target and renamed, so a partial file never appears under its final name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from .base import ObjectStore, Progress, StoreError


def download_many(
    store: ObjectStore,
    items: Sequence[tuple[str, Path]],
    *,
    concurrency: int = 16,
    progress: Callable[[str, Path], None] | None = None,
    on_bytes: Progress | None = None,
    failed: dict[str, StoreError] | None = None,
) -> None:
    """Download every (key, path); the first failure is raised after the rest finish,
    unless `failed` is given: then each key's StoreError goes there (other errors still
    raise). `progress` is called per finished file, `on_bytes` per chunk (from worker
    threads)."""
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = {
            pool.submit(store.get_file, key, path, on_bytes): (key, path) for key, path in items
        }
        error: BaseException | None = None
        for future in as_completed(futures):
            exc = future.exception()
            if isinstance(exc, StoreError) and failed is not None:
                failed[futures[future][0]] = exc
            elif exc is not None:
                error = error or exc
            elif progress is not None:
                progress(*futures[future])
    if error is not None:
        raise error
