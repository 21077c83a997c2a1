"""A moto S3 server in its own process on loopback, for the benchmarks and the crash fuzz
(in-process it would compete with the measured code, or the fuzz's watching, for the GIL)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import boto3


@contextlib.contextmanager
def moto_bucket(bucket: str) -> Iterator[str]:
    """Start the server, create `bucket`, yield the endpoint URL; stop it afterwards."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "testing")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        for _ in range(100):
            try:
                client.create_bucket(Bucket=bucket)
                break
            except Exception:  # not listening yet
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait()
