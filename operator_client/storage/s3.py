"""S3 and S3-compatible stores through boto3."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from functools import cache, partial
from pathlib import Path
from typing import Any, TypeVar

import boto3
import botocore.exceptions
import botocore.session
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.loaders import Loader
from urllib3.exceptions import ProtocolError

from ..untrusted import MAX_DOCUMENT
from .base import ObjectInfo, ObjectStore, Progress, StoreError
from .keys import join_key

_PRECONDITION = {"PreconditionFailed", "ConditionalRequestConflict", "412"}
_BUSY = {"SlowDown", "RequestTimeout", "Throttling", "ThrottlingException", "ServiceUnavailable"}
# How long an operation keeps retrying a store that does not answer (an outage, a
# partition, a response that breaks off mid-body) before it fails: botocore's own
# retries give up after a few seconds, shorter than an ordinary S3 blip.
DEFAULT_PATIENCE = 60.0
MAX_BACKOFF = 8.0

# What a store operation can raise: botocore's errors, and what escapes its wrapping.
_FAILURES = (ClientError, BotoCoreError, ProtocolError, ConnectionError, TimeoutError)

log = logging.getLogger("kctl_train.storage")
T = TypeVar("T")


def transient(exc: BaseException) -> bool:
    """Whether trying the same request again later may succeed."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or exc.response.get("Error", {}).get("Code") in _BUSY
    # Connection refused/reset/closed, timeouts, a body that ends early. Not every
    # OSError: a full local disk while writing a download is not the store's fault.
    return isinstance(
        exc,
        (
            botocore.exceptions.ConnectionError,
            botocore.exceptions.HTTPClientError,
            botocore.exceptions.IncompleteReadError,
            # botocore reads a non-streaming answer (a listing, an error body) outside its
            # own exception wrapping, so a reset mid-answer arrives as urllib3's error.
            ProtocolError,
            ConnectionError,
            TimeoutError,
        ),
    )


@cache
def _data_loader() -> Loader:
    """botocore's reader of its data files (S3's API model, the endpoint rules), one for
    the process: parsing them is most of what making a client costs (about 0.15 s each),
    and a command or a rank makes several."""
    loader: Loader = botocore.session.get_session().get_component("data_loader")
    return loader


def _session() -> boto3.session.Session:
    """A session of its own for each client, so credentials are found as the environment
    says now, reading botocore's files through the process's one loader."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _data_loader())
    return boto3.session.Session(botocore_session=core)


class S3Store(ObjectStore):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        concurrency: int = 8,
        patience: float = DEFAULT_PATIENCE,
    ) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.patience = patience
        self.url = f"s3://{bucket}/{self.prefix + '/' if self.prefix else ''}"
        options: dict[str, Any] = {
            # The pool must hold every concurrent transfer, or they queue for a connection.
            "max_pool_connections": max(10, concurrency * 2),
            # A few quick retries here; _retrying waits out longer outages within patience.
            "retries": {"mode": "standard", "max_attempts": 3},
            "connect_timeout": 5,
            "read_timeout": 30,
        }
        if endpoint:
            # Many S3-compatible servers reject boto3's default CRC32 checksum headers.
            options["request_checksum_calculation"] = "when_required"
            options["response_checksum_validation"] = "when_required"
            options["s3"] = {"addressing_style": "path"}
        self.client = _session().client(
            "s3",
            endpoint_url=endpoint,
            region_name=region or os.environ.get("AWS_REGION"),
            config=Config(**options),
        )
        self.transfer = TransferConfig(
            max_concurrency=concurrency, multipart_threshold=64 << 20, multipart_chunksize=16 << 20
        )

    def probe(self) -> None:
        # One short attempt, not the eight patient retries of real transfers.
        quick = self.client.meta.config.merge(
            Config(connect_timeout=3, read_timeout=5, retries={"total_max_attempts": 1})
        )
        client = _session().client(
            "s3",
            endpoint_url=self.client.meta.endpoint_url,
            region_name=self.client.meta.region_name,
            config=quick,
        )
        try:
            client.head_bucket(Bucket=self.bucket)
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"{self.url}: {exc}") from exc

    def _key(self, key: str) -> str:
        return join_key(self.prefix, key)

    def _retrying(self, key: str, operation: Callable[[], T]) -> T:
        """Run one store operation, again with backoff while its failure is transient and
        `patience` seconds have not passed; StoreError naming the key otherwise."""
        deadline = time.monotonic() + self.patience
        delay = 0.5
        while True:
            try:
                return operation()
            except _FAILURES as exc:
                if not transient(exc) or time.monotonic() + delay > deadline:
                    raise StoreError(f"{self.url}{key}: {exc}") from exc
                log.warning("%s%s: %s; retrying in %.1fs", self.url, key, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._retrying(
            key, lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        )

    def put_file(self, key: str, path: Path) -> None:
        self._retrying(
            key,
            lambda: self.client.upload_file(
                str(path), self.bucket, self._key(key), Config=self.transfer
            ),
        )

    def create_if_absent(self, key: str, data: bytes) -> bool:
        def create() -> bool:
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*"
                )
                return True
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _PRECONDITION:
                    return False
                raise

        return self._retrying(key, create)

    def get_bytes(self, key: str, limit: int = MAX_DOCUMENT) -> bytes:
        def get() -> bytes:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            if response["ContentLength"] > limit:
                response["Body"].close()
                raise StoreError(f"{self.url}{key}: larger than {limit} bytes; not reading it")
            body: bytes = response["Body"].read(limit + 1)
            return body

        return self._retrying(key, get)

    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)

        def download() -> None:
            # One GET for small objects (download_file would HEAD first); large ones go
            # through the transfer manager's parallel ranged GETs. A body that breaks off
            # is fetched again whole (_retrying).
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            if response["ContentLength"] > self.transfer.multipart_threshold:
                response["Body"].close()
                self.client.download_file(
                    self.bucket, self._key(key), tmp, Config=self.transfer, Callback=progress
                )
                return
            with open(tmp, "wb") as fh:
                for chunk in response["Body"].iter_chunks(1 << 20):
                    fh.write(chunk)
                    if progress is not None:
                        progress(len(chunk))

        try:
            self._retrying(key, download)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        if prefix.endswith("/") and not full.endswith("/"):
            full += "/"
        strip = len(self.prefix) + 1 if self.prefix else 0

        def listing() -> list[ObjectInfo]:
            found = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full
            ):
                for obj in page.get("Contents", []):
                    found.append(ObjectInfo(obj["Key"][strip:], obj["Size"]))
            return found

        return sorted(self._retrying(prefix, listing), key=lambda o: o.key)

    def delete(self, keys: Iterable[str]) -> None:
        names = list(keys)
        for i in range(0, len(names), 1000):
            part = names[i : i + 1000]
            delete = {"Objects": [{"Key": self._key(k)} for k in part], "Quiet": True}
            # Named by keys relative to the store: the error shows the store's URL once.
            named = part[0] if len(part) == 1 else f"{part[0]} (and {len(part) - 1} more)"
            self._retrying(
                named, partial(self.client.delete_objects, Bucket=self.bucket, Delete=delete)
            )
