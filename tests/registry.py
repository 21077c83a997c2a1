"""A real container registry on loopback for tests and benchmarks: Debian's
`docker-registry` (the CNCF distribution registry), optionally behind htpasswd auth."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

WHY_NOT = "docker-registry is not installed (`make test` installs Debian's docker-registry as root)"


def available() -> bool:
    return shutil.which("docker-registry") is not None


@contextmanager
def serve(directory: Path, users: dict[str, str] | None = None) -> Iterator[str]:
    """A registry storing under `directory`; yields its host:port. `users`: htpasswd
    auth with these (bcrypt via `htpasswd -B`, the only scheme the registry takes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    auth = ""
    if users:
        htpasswd = directory / "htpasswd"
        for user, password in users.items():
            line = subprocess.run(
                ["htpasswd", "-Bbn", user, password], capture_output=True, text=True, check=True
            ).stdout.strip()
            with htpasswd.open("a") as fh:
                fh.write(line + "\n")
        auth = f"auth:\n  htpasswd:\n    realm: kctl-train-test\n    path: {htpasswd}\n"
    config = directory / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {directory / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n{auth}"
    )
    log = (directory / "registry.log").open("w")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2)
                break
            except requests.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((directory / "registry.log").read_text()) from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def put_image(host: str, repository: str, tag: str, auth: tuple[str, str] | None = None) -> str:
    """Store a minimal OCI image (a config blob, no layers) as repository:tag through
    the registry's API; the manifest's digest (what the registry must report)."""
    import hashlib
    import json

    base = f"http://{host}/v2/{repository}"
    config = b"{}"
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    start = requests.post(f"{base}/blobs/uploads/", auth=auth, timeout=10)
    start.raise_for_status()
    location = start.headers["Location"]
    location = location if location.startswith("http") else f"http://{host}{location}"
    separator = "&" if "?" in location else "?"
    requests.put(
        f"{location}{separator}digest={config_digest}", data=config, auth=auth, timeout=10
    ).raise_for_status()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [],
        }
    ).encode()
    requests.put(
        f"{base}/manifests/{tag}",
        data=manifest,
        headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        auth=auth,
        timeout=10,
    ).raise_for_status()
    return "sha256:" + hashlib.sha256(manifest).hexdigest()
