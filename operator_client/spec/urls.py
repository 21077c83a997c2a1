"""Checks of the URLs a job names (its store, its S3 endpoint): credentials never travel
inside one (they would be copied into the manifest's annotations and the pods' env), and
a path is written in its normal form (no `.`, `..` or empty segments), so the location a
user reads is the one used."""

from __future__ import annotations

from urllib.parse import urlsplit

# What checkpoint.resume may name besides its words: one checkpoint's directory.
CHECKPOINT_URI_SCHEMES = ("s3://", "file:///")


def credentials_problem(url: str) -> str | None:
    """Why `url` must not be used as given: it carries a user or password (None: it does
    not)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None  # not a URL at all: the field's pattern says so
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return (
            "credentials in a URL are refused (they would be copied into the manifest and "
            "the pods' environment); remove 'user:password@' and give them through "
            "storage.credentialsSecret (a Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        )
    return None


def path_problem(path: str) -> str | None:
    """Why a store path is not in its normal form (None: it is)."""
    segments = path.strip("/").split("/") if path.strip("/") else []
    bad = [s for s in segments if s in ("", ".", "..")]
    if bad or "//" in path:
        return (
            f"the path {path!r} has empty, '.' or '..' segments; write it in its normal form "
            "(the place it names, without '..')"
        )
    return None


def check_store_url(url: str) -> str:
    """A validator: `url` when it carries no credentials and its path is normal."""
    problem = credentials_problem(url) or path_problem(urlsplit(url).path)
    if problem:
        raise ValueError(problem)
    return url


def check_endpoint(url: str) -> str:
    """A validator: an S3 endpoint without credentials."""
    problem = credentials_problem(url)
    if problem:
        raise ValueError(problem)
    return url
