"""Image references, registry credentials, and the one registry question a build asks:
which digest does this tag have, if any (the distribution API's manifest HEAD)."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import BadInput, RegistryError

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
# Everything a registry may store for a tag: the digest it reports is of what it stores.
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
TIMEOUT = 30
# The distribution reference grammar: a name (registry and path) of at most 255 characters.
MAX_NAME = 255
_REFERENCE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class ImageRef:
    """registry/repository[:tag][@digest], with Docker's defaults made explicit."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Docker's grammar: the first component is a registry when it has a dot or a
        port or is localhost; else the image is on Docker Hub (library/ for one name)."""
        # Name, ":" and a tag of at most 128, "@sha256:" and 64 hex digits.
        m = _REFERENCE.match(text.strip()) if len(text.strip()) <= MAX_NAME + 201 else None
        if len(m["name"] if m else text.strip().split(":")[0]) > MAX_NAME:
            raise BadInput(
                f"{text[:60]!r}… ({len(text)} characters): an image name has at most "
                f"{MAX_NAME} characters (the registry's reference grammar)"
            )
        if m is None:
            raise BadInput(
                f"{text!r} is not an image reference; use REGISTRY/PATH[:TAG], e.g. "
                "ghcr.io/acme/trainer or localhost:5000/team/trainer"
            )
        first, _, rest = m["name"].partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            registry, repository = first, rest
        else:
            registry, repository = DOCKER_HUB, m["name"]
            if "/" not in repository:
                repository = f"library/{repository}"
        return cls(registry, repository, m["tag"], m["digest"])

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        return (
            self.name
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )

    def with_tag(self, tag: str) -> ImageRef:
        return replace(self, tag=tag, digest=None)

    def pinned(self, digest: str) -> str:
        """The reference a job runs: by digest, which no push can move."""
        return f"{self.name}@{digest}"

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def loopback(self) -> bool:
        """A registry on this machine: spoken to over plain HTTP when it has no TLS,
        as Docker does for 127.0.0.0/8."""
        host = urlsplit(f"//{self.registry}").hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


# Where credentials are, in the order the tools look: an explicit file, podman/buildah's,
# then Docker's (all in Docker's config.json format).
def auth_files(explicit: str | None, env: Mapping[str, str] = os.environ) -> list[Path]:
    """The credential files to consult, first match wins."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise BadInput(f"--registry-auth {explicit}: no such file")
        return [path]
    paths = []
    if env.get("REGISTRY_AUTH_FILE"):
        paths.append(Path(env["REGISTRY_AUTH_FILE"]))
    if env.get("XDG_RUNTIME_DIR"):
        paths.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    docker = Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else Path.home() / ".docker"
    paths.append(docker / "config.json")
    return [p for p in paths if p.is_file()]


def _host_of(key: str) -> str:
    key = re.sub(r"^https?://", "", key).split("/", 1)[0]
    return DOCKER_HUB if key in ("index.docker.io", DOCKER_HUB_API) else key


def credentials(registry: str, files: list[Path]) -> tuple[str, str] | None:
    """(user, secret) for `registry` from the first file that has it: an `auths` entry
    or a credential helper (credHelpers, credsStore: docker-credential-NAME)."""
    for path in files:
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise BadInput(f"{path}: not a readable registry credentials file ({exc})") from None
        for key, entry in (config.get("auths") or {}).items():
            if _host_of(key) == registry and entry.get("auth"):
                user, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
                return user, secret
        helper = (config.get("credHelpers") or {}).get(registry) or config.get("credsStore")
        if helper:
            found = _from_helper(helper, registry)
            if found:
                return found
    return None


def _from_helper(helper: str, registry: str) -> tuple[str, str] | None:
    server = "https://index.docker.io/v1/" if registry == DOCKER_HUB else registry
    try:
        done = subprocess.run(
            [f"docker-credential-{helper}", "get"],
            input=server,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except FileNotFoundError:
        raise BadInput(
            f"the registry credentials name the helper docker-credential-{helper}, "
            "which is not installed"
        ) from None
    if done.returncode != 0:
        return None  # the helper has nothing for this registry
    answer = json.loads(done.stdout)
    return answer["Username"], answer["Secret"]


class Registry:
    """A registry's HTTP API for one repository, with Docker's token and basic auth."""

    def __init__(self, ref: ImageRef, creds: tuple[str, str] | None) -> None:
        import requests

        self.ref, self.creds = ref, creds
        self.session = requests.Session()
        self.base = f"https://{ref.api_host}"

    def digest(self, tag: str) -> str | None:
        """The digest the registry reports for `tag`; None when it has no such tag."""
        url = f"/v2/{self.ref.repository}/manifests/{tag}"
        answer = self._request("HEAD", url, {"Accept": MANIFEST_TYPES})
        if answer.status_code == 404:
            # A HEAD has no body: GET to tell "no such tag" from "no registry here".
            body = self._request("GET", url, {"Accept": MANIFEST_TYPES})
            if _error_codes(body) & {"MANIFEST_UNKNOWN", "NAME_UNKNOWN", "TAG_INVALID"}:
                return None
            raise RegistryError(
                f"{self.ref.api_host} does not serve the registry API (404 for {url}); "
                f"check the registry in {self.ref.name}",
                404,
            )
        if answer.status_code != 200:
            raise self._refused(answer.status_code, answer.reason)
        digest = answer.headers.get("Docker-Content-Digest")
        if not digest:
            raise RegistryError(
                f"{self.ref.api_host} answered for {self.ref.name}:{tag} without a digest "
                "(Docker-Content-Digest); is it a distribution registry?"
            )
        return str(digest)

    def _request(self, method: str, path: str, headers: dict[str, str]) -> Any:
        import requests

        try:
            answer = self._send(method, path, headers)
        except requests.exceptions.SSLError:
            if not self.ref.loopback:
                raise
            self.base = f"http://{self.ref.api_host}"  # a loopback registry without TLS
            answer = self._send(method, path, headers)
        if answer.status_code == 401:
            auth = self._authorization(answer.headers.get("WWW-Authenticate", ""))
            if auth:
                answer = self._send(method, path, {**headers, "Authorization": auth})
        return answer

    def _send(self, method: str, path: str, headers: dict[str, str]) -> Any:
        import requests

        try:
            return self.session.request(method, self.base + path, headers=headers, timeout=TIMEOUT)
        except requests.exceptions.SSLError:
            raise
        except requests.exceptions.RequestException as exc:
            raise RegistryError(
                f"registry {self.ref.api_host} (for {self.ref.name}) did not answer: "
                f"{type(exc).__name__}"
            ) from None

    def _authorization(self, challenge: str) -> str | None:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.creds is None:
                return None
            return "Basic " + base64.b64encode(":".join(self.creds).encode()).decode()
        if scheme.lower() != "bearer":
            return None
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        query = {"service": fields.get("service", "")}
        query["scope"] = fields.get("scope") or f"repository:{self.ref.repository}:pull"
        token = self.session.get(
            fields.get("realm", ""), params=query, auth=self.creds, timeout=TIMEOUT
        )
        if token.status_code != 200:
            raise self._refused(token.status_code, "its token service refused")
        body = token.json()
        return f"Bearer {body.get('token') or body.get('access_token')}"

    def _refused(self, status: int, what: str) -> RegistryError:
        return RegistryError(refusal(self.ref.name, self.ref.registry, status, what), status)


def _error_codes(answer: Any) -> set[str]:
    try:
        return {str(e.get("code")) for e in answer.json().get("errors", [])}
    except ValueError:
        return set()


def refusal(repository: str, registry: str, status: int, what: str = "") -> str:
    """One line for a registry's refusal, saying what to do."""
    if status == 401:
        return (
            f"registry refused {repository}: 401 unauthorized; log in (docker login {registry}, "
            "podman login) or pass --registry-auth FILE"
        )
    if status == 403:
        return (
            f"registry refused {repository}: 403 denied; these credentials may not push to or "
            "pull from it"
        )
    if status == 404:
        return (
            f"registry has no repository {repository} (404): create it first (ECR, Harbor), "
            "or check the name"
        )
    return f"registry {registry} failed for {repository}: {status} {what}".rstrip()
