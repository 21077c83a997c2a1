"""Duration, quantity and checkpoint-interval strings, as pydantic-aware value types.

Each type keeps the user's text (so `render` shows what was written) and the parsed
value (so code never parses twice). Parsing errors are plain ValueErrors whose message
says what a valid value looks like; the spec loader attaches file:line:column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic_core import core_schema

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue

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

# Whole bytes with an optional binary or decimal suffix.
BYTES_PATTERN = r"^[0-9]+([KMGTPE]i|[kMGTPE])?$"

EVERY_PATTERN = r"^(([0-9]+[smhd])+|[1-9][0-9]* ?steps?)$"

# The API stores these as int32 (ttlSecondsAfterFinished, replicas) or int64 (deadlines,
# quantities): bounded here so a typo is an error, not a 28-digit field or an overflow.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_STEPS = re.compile(r"^([1-9][0-9]*) ?steps?$")


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


class _TextValue:
    """Base for value types that are written as one string in YAML and JSON."""

    text: str
    json_pattern: ClassVar[str]
    json_description: ClassVar[str]
    accepts_numbers: ClassVar[bool] = False

    @classmethod
    def parse(cls, text: str) -> Any:
        raise NotImplementedError

    @classmethod
    def _validate(cls, value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            raise ValueError(f"expected a string like {cls.json_description}, got {value!r}")
        if cls.accepts_numbers and isinstance(value, (int, float)):
            value = format(value, "g") if isinstance(value, float) else str(value)
        if not isinstance(value, str):
            raise ValueError(
                f"expected a string like {cls.json_description}, got {type(value).__name__} "
                f"{value!r}"
            )
        return cls.parse(value.strip())

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda v: v.text, when_used="always"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out: dict[str, Any] = {"pattern": cls.json_pattern, "description": cls.json_description}
        if cls.accepts_numbers:
            out = {"anyOf": [{"type": "string", **out}, {"type": "number", "minimum": 0}]}
        else:
            out["type"] = "string"
        return out


@dataclass(frozen=True)
class Duration(_TextValue):
    """A time span written like ``30m``; ``seconds`` holds its value."""

    text: str
    seconds: int

    json_pattern: ClassVar[str] = DURATION_PATTERN
    json_description: ClassVar[str] = "'90s', '30m', '1h30m', '72h' or '2d'"

    @classmethod
    def parse(cls, text: str) -> Duration:
        return cls(text, parse_duration(text))


@dataclass(frozen=True)
class Quantity(_TextValue):
    """A Kubernetes resource quantity written like ``64Gi``; ``value`` holds its size."""

    text: str
    value: Decimal

    json_pattern: ClassVar[str] = QUANTITY_PATTERN
    json_description: ClassVar[str] = "'500m', '8', '64Gi' or '512Mi'"
    accepts_numbers: ClassVar[bool] = True

    @classmethod
    def parse(cls, text: str) -> Quantity:
        return cls(text, parse_quantity(text))


@dataclass(frozen=True)
class ByteSize(Quantity):
    """A size in bytes written like ``14Gi``: whole numbers with a binary or decimal suffix
    (the Helm chart computes with it in integers)."""

    json_pattern: ClassVar[str] = BYTES_PATTERN
    json_description: ClassVar[str] = "'14Gi', '800Mi' or '2T'"
    accepts_numbers: ClassVar[bool] = False

    @classmethod
    def parse(cls, text: str) -> ByteSize:
        if not re.fullmatch(BYTES_PATTERN, text):
            raise ValueError(
                f"{text!r} is not a size in bytes: write a whole number with a suffix, "
                f"like {cls.json_description} (1.5Gi is 1536Mi)"
            )
        return cls(text, parse_quantity(text))


@dataclass(frozen=True)
class Every(_TextValue):
    """How often to checkpoint: a duration (``30m``) or a step count (``500 steps``)."""

    text: str
    seconds: int | None
    steps: int | None

    json_pattern: ClassVar[str] = EVERY_PATTERN
    json_description: ClassVar[str] = "'30m' (wall time) or '500 steps'"

    @classmethod
    def parse(cls, text: str) -> Every:
        steps = _STEPS.fullmatch(text)
        if steps:
            if len(steps.group(1)) > 10 or int(steps.group(1)) > INT32_MAX:
                raise ValueError(f"{text!r}: a step interval is at most {INT32_MAX} steps")
            return cls(text, None, int(steps.group(1)))
        if re.fullmatch(DURATION_PATTERN, text) and parse_duration(text) > 0:
            return cls(text, parse_duration(text), None)
        raise ValueError(
            f"{text!r} is not a checkpoint interval: write a positive duration such as "
            "'30m' or a step count such as '500 steps'"
        )
