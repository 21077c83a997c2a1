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


# Object names as the API server validates them (apimachinery validation.IsDNS1123Label,
# IsDNS1123Subdomain, IsConfigMapKey). These are also what keeps a name that reaches a path
# on this machine (a local job's directory, a volume's, a Secret's file) a single
# component: no '/', no '..', never empty.
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...' ({len(str(value))} characters)"


def _dns_problem(
    value: object, what: str, pattern: re.Pattern[str], most: int, form: str
) -> str | None:
    if isinstance(value, str) and len(value) <= most and pattern.fullmatch(value):
        return None
    return f"{what} {_shown(value)} is not a valid name: at most {most} {form}"


def label_problem(value: object, what: str) -> str | None:
    """Why `value` is not a DNS-1123 label (a namespace, a volume's name), or None."""
    form = (
        "lowercase letters, digits and '-', starting and ending with a letter or digit "
        "(DNS-1123 label)"
    )
    return _dns_problem(value, what, _LABEL, LABEL_MAX, form)


def subdomain_problem(value: object, what: str) -> str | None:
    """Why `value` is not a DNS-1123 subdomain (an object's name), or None."""
    form = (
        "lowercase letters, digits, '-' and '.', each dot-separated part starting and "
        "ending with a letter or digit (DNS-1123 subdomain)"
    )
    return _dns_problem(value, what, _SUBDOMAIN, SUBDOMAIN_MAX, form)


def config_key_problem(value: object, what: str) -> str | None:
    """Why `value` is not a Secret or ConfigMap key (letters, digits, '-', '_', '.'; not
    '.' or '..'), or None."""
    if (
        isinstance(value, str)
        and len(value) <= SUBDOMAIN_MAX
        and _CONFIG_KEY.fullmatch(value)
        and value not in (".", "..")
    ):
        return None
    return (
        f"{what} {_shown(value)} is not a valid key: at most {SUBDOMAIN_MAX} letters, "
        "digits, '-', '_' and '.', and not '.' or '..'"
    )
