"""Kubernetes quantities (500m, 64Gi) and durations (90s, 1h30m) as plain values, with
their bounds: no pydantic here, so the control plane's rules and the CLI's flags parse them
without the spec model's cost (units.py wraps them as the spec's value types)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# The API stores these as int32 (ttlSecondsAfterFinished, replicas) or int64 (deadlines,
# quantities): bounded here so a typo is an error, not a 28-digit field or an overflow.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_PATTERN = r"^([0-9]+[smhd])+$"
_DURATION_PART = re.compile(r"([0-9]+)([smhd])")

# Kubernetes resource.Quantity: a decimal number with an optional binary (Ki..Ei),
# decimal SI (n..E) or exponent suffix.
QUANTITY_PATTERN = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def parse_duration(text: str) -> int:
    """Seconds in a duration such as ``90s``, ``30m``, ``72h``, ``1h30m`` or ``2d``."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(
            f"{text!r} is not a duration: write a number with a unit s, m, h or d, "
            "e.g. '90s', '30m', '1h30m', '72h'"
        )
    parts = _DURATION_PART.findall(text)
    # Bounded before int(): a thousand-digit number would only be refused later.
    if (
        any(len(n.lstrip("0")) > 10 for n, _ in parts)
        or (seconds := sum(int(n) * _DURATION_UNITS[u] for n, u in parts)) > INT32_MAX
    ):
        raise ValueError(
            f"{text!r} is too long: a duration is at most {INT32_MAX}s (about 68 years)"
        )
    return seconds


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity such as ``500m``, ``8``, ``64Gi`` or ``1e3``."""
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise ValueError(
            f"{text!r} is not a Kubernetes quantity: write a number with an optional "
            "suffix, e.g. '500m' or '8' for CPU, '64Gi' or '512Mi' for memory"
        )
    number, suffix = match.group(1), match.group(3) or ""
    try:
        if suffix[:1] in ("e", "E") and suffix != "Ei":
            if abs(int(suffix[1:])) > 30:
                raise ValueError(f"{text!r}: the exponent is out of range")
            value = Decimal(number + suffix)
        else:
            value = Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from exc
    if value > INT64_MAX:
        raise ValueError(f"{text!r} is too large for a Kubernetes quantity")
    return value
