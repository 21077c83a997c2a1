"""One object-store interface for runs: ``s3://`` (boto3) and ``file://`` (a local directory)."""

from .base import ObjectInfo, ObjectStore, StoreError
from .keys import UnsafeKeyError, join_key, safe_relative_path
from .open import open_store

__all__ = [
    "ObjectInfo",
    "ObjectStore",
    "StoreError",
    "UnsafeKeyError",
    "join_key",
    "open_store",
    "safe_relative_path",
]
