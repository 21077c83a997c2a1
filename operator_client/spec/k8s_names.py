"""Kubernetes' own rules for label keys and values and annotation sizes (apimachinery's
validation: IsQualifiedName, IsValidLabelValue, ValidateAnnotations), so that a job the
API server would refuse is refused here first, at the field to change."""

from __future__ import annotations

import re

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NAME_MAX = 63
PREFIX_MAX = 253
# The total size of all annotation keys and values of one object.
ANNOTATIONS_MAX = 256 * 1024


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a valid label or annotation key ([prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"key {key!r}: the prefix before '/' is empty"
    if prefix and (len(prefix) > PREFIX_MAX or not _SUBDOMAIN.fullmatch(prefix)):
        return (
            f"key {key!r}: the prefix {prefix!r} must be a DNS subdomain (lowercase letters, "
            f"digits, '-' and '.', at most {PREFIX_MAX} characters)"
        )
    if not name or len(name) > NAME_MAX or not _NAME.fullmatch(name):
        return (
            f"key {key!r}: the name {name!r} must be 1-{NAME_MAX} characters of letters, "
            "digits, '-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid label value, or None (empty is valid)."""
    if value and (len(value) > NAME_MAX or not _NAME.fullmatch(value)):
        return (
            f"value {value!r} must be at most {NAME_MAX} characters of letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit (or empty)"
        )
    return None


def annotations_size(annotations: dict[str, str]) -> int:
    """Bytes the API server counts against ANNOTATIONS_MAX."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
