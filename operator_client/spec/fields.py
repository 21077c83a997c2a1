"""The pieces every part of the job model is made of: the base model (camelCase aliases,
unknown fields refused, frozen), the name patterns, and the value types a job's free text
and free-form arguments go through (no control characters, no NaN)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, JsonValue
from pydantic.alias_generators import to_camel

from .quantities import INT32_MAX

DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Lightning-style import path: "package.module:Class".
IMPORT_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
# Extended resource names such as nvidia.com/gpu, amd.com/gpu, nvidia.com/mig-1g.10gb.
RESOURCE_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _scalar_to_str(value: Any) -> Any:
    """Let `OMP_NUM_THREADS: 4` mean "4": Kubernetes wants strings, YAML gives numbers."""
    if isinstance(value, bool):
        raise ValueError(
            f"quote the value: YAML reads it as the boolean {str(value).lower()}, not a string"
        )
    if isinstance(value, (int, float)):
        return str(value)
    return value


# Control characters other than tab and newlines: a NUL cannot reach a process's
# environment or arguments at all, the others only confuse logs and terminals.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def control_character(text: str) -> str | None:
    """A description of the first control character in text, or None."""
    found = _CONTROL.search(text)
    return f"U+{ord(found.group()):04X} at offset {found.start()}" if found else None


def no_control(value: str) -> str:
    problem = control_character(value)
    if problem:
        raise ValueError(f"contains a control character ({problem}); remove it")
    return value


Text = Annotated[str, BeforeValidator(_scalar_to_str), AfterValidator(no_control)]


def _finite(value: Any, path: str = "") -> Any:
    """Refuse NaN and infinities anywhere in free-form JSON: JSON cannot carry them."""
    if isinstance(value, float) and not math.isfinite(value):
        where = f" at {path}" if path else ""
        raise ValueError(f"{value}{where} is not a finite number, which JSON cannot carry")
    if isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _finite(item, f"{path}[{i}]")
    return value


# Free-form arguments that travel as JSON (the manifest, the pods' env).
JsonArgs = Annotated[dict[str, JsonValue], AfterValidator(_finite)]


def _check_processes(value: Any) -> Any:
    # One clear message instead of one per member of the union below.
    if value in ("auto", "detect") or (type(value) is int and 1 <= value <= INT32_MAX):
        return value
    raise ValueError(
        f"expected 'auto', 'detect' or a whole number from 1 to {INT32_MAX}, got {value!r}"
    )


ProcessesPerNode = Annotated[Literal["auto", "detect"] | int, BeforeValidator(_check_processes)]


class SpecModel(BaseModel):
    """The base of every part of a TrainingJob."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        # Nested models are validated through TrainingJob's schema: building a validator
        # for each of them at import would double the CLI's start-up time.
        defer_build=True,
        validate_default=False,
    )
