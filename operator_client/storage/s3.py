"""S3 and S3-compatible stores through boto3."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .base import ObjectInfo, ObjectStore, Progress, StoreError
from .keys import join_key

_PRECONDITION = {"PreconditionFailed", "ConditionalRequestConflict", "412"}


class S3Store(ObjectStore):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        concurrency: int = 8,
    ) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix + '/' if self.prefix else ''}"
        options: dict[str, Any] = {
            # The pool must hold every concurrent transfer, or they queue for a connection.
            "max_pool_connections": max(10, concurrency * 2),
            "retries": {"mode": "standard", "max_attempts": 8},
        }
        if endpoint:
            # Many S3-compatible servers reject boto3's default CRC32 checksum headers.
            options["request_checksum_calculation"] = "when_required"
            options["response_checksum_validation"] = "when_required"
            options["s3"] = {"addressing_style": "path"}
        self.client = boto3.session.Session().client(
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
        client = boto3.session.Session().client(
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

    def _fail(self, key: str, exc: Exception) -> StoreError:
        return StoreError(f"{self.url}{key}: {exc}")

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(key, exc) from exc

    def put_file(self, key: str, path: Path) -> None:
        try:
            self.client.upload_file(str(path), self.bucket, self._key(key), Config=self.transfer)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(key, exc) from exc

    def create_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*"
            )
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _PRECONDITION:
                return False
            raise self._fail(key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail(key, exc) from exc

    def get_bytes(self, key: str) -> bytes:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self._key(key))[
                "Body"
            ].read()
            return body
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(key, exc) from exc

    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)
        try:
            # One GET for small objects (download_file would HEAD first); large ones go
            # through the transfer manager's parallel ranged GETs.
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            if response["ContentLength"] > self.transfer.multipart_threshold:
                response["Body"].close()
                self.client.download_file(
                    self.bucket, self._key(key), tmp, Config=self.transfer, Callback=progress
                )
            else:
                with open(tmp, "wb") as fh:
                    for chunk in response["Body"].iter_chunks(1 << 20):
                        fh.write(chunk)
                        if progress is not None:
                            progress(len(chunk))
            os.replace(tmp, path)
        except BaseException as exc:
            os.unlink(tmp)
            if isinstance(exc, ClientError | BotoCoreError):
                raise self._fail(key, exc) from exc
            raise

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        if prefix.endswith("/") and not full.endswith("/"):
            full += "/"
        strip = len(self.prefix) + 1 if self.prefix else 0
        found = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full
            ):
                for obj in page.get("Contents", []):
                    found.append(ObjectInfo(obj["Key"][strip:], obj["Size"]))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(prefix, exc) from exc
        return sorted(found, key=lambda o: o.key)

    def delete(self, keys: Iterable[str]) -> None:
        batch = [{"Key": self._key(k)} for k in keys]
        try:
            for i in range(0, len(batch), 1000):
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch[i : i + 1000], "Quiet": True}
                )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(batch[0]["Key"] if batch else "", exc) from exc
