"""Duration, quantity and checkpoint-interval strings, as pydantic-aware value types.

Each type keeps the user's text (so `render` shows what was written) and the parsed
value (so code never parses twice). Parsing errors are plain ValueErrors whose message
says what a valid value looks like; the spec loader attaches file:line:column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic_core import core_schema

from .quantities import (
    DURATION_PATTERN,
    INT32_MAX,
    QUANTITY_PATTERN,
    parse_duration,
    parse_quantity,
)

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue

# Whole bytes with an optional binary or decimal suffix.
BYTES_PATTERN = r"^[0-9]+([KMGTPE]i|[kMGTPE])?$"

EVERY_PATTERN = r"^(([0-9]+[smhd])+|[1-9][0-9]* ?steps?)$"
_STEPS = re.compile(r"^([1-9][0-9]*) ?steps?$")


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
