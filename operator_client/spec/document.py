"""The job as data: its canonical JSON (carried to the pods, hashed), and the job back
from a rendered manifest. Pure functions of the spec, shared by the renderer, the runtime
and the backends (none of which imports another for them)."""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TextIO

from ..contract import SPEC_ENV

# The most a job file (or a job given as text) may hold: the job must fit in one
# environment variable of the pods (checks.py), so anything near this size could not run
# anyway; it keeps validation well under a second.
MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class JobText:
    """A job file's text (or a TrainJob object's) and the name its messages give it."""

    text: str
    source: str

    @classmethod
    def read(cls, stream: TextIO, source: str = "<stdin>") -> JobText:
        """The text of `stream`, no more of it than a job file may hold (one character
        more: the loader then says it is too large)."""
        return cls(stream.read(MAX_BYTES + 1), source)


if TYPE_CHECKING:
    from .model import TrainingJob


def spec_document(job: TrainingJob) -> dict[str, Any]:
    """The job with every default filled in, as JSON-compatible data (unset optional
    fields left out, as Helm leaves out null values)."""
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


def spec_hash(job: TrainingJob) -> str:
    """sha256 of the canonical spec JSON; changes exactly when the job changes."""
    return hashlib.sha256(canonical_json(spec_document(job)).encode()).hexdigest()


def nproc_per_node(job: TrainingJob) -> str:
    """torchrun's `--nproc-per-node` for the job: an explicit count unless the user asked
    torchrun to detect GPUs (its own "auto" starts one process per CPU core on GPU-less
    pods)."""
    nproc = job.spec.processes_per_node
    if nproc == "detect":
        return "auto"
    if nproc == "auto":
        return str(job.spec.resources.gpus or 1)
    return str(nproc)


class NotRenderedError(ValueError):
    """A manifest that kctl-train did not render (no spec in its container env)."""


def job_of(manifest: dict[str, Any]) -> TrainingJob:
    """The TrainingJob a rendered PyTorchJob carries in its trainer containers (a
    TrainJob: in `trainer.env`)."""
    spec = manifest.get("spec", {})
    envs = [(spec.get("trainer") or {}).get("env") or []]
    for replica in (spec.get("pytorchReplicaSpecs") or {}).values():
        envs += [c.get("env") or [] for c in replica["template"]["spec"]["containers"]]
    for env in envs:
        for item in env:
            if item.get("name") == SPEC_ENV and "value" in item:
                return _parsed(item["value"])
    raise NotRenderedError(
        f"{str(manifest.get('kind', 'job')).lower()}/{manifest['metadata']['name']} was not "
        f"rendered by kctl-train (no {SPEC_ENV} in its trainer's env)"
    )


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> TrainingJob:
    """The job of a spec JSON, parsed once: a followed job's view asks for it again and
    again (its save window, its estimate), and a TrainingJob is immutable."""
    from .model import TrainingJob  # pydantic: only paid by the callers that parse a job

    return TrainingJob.model_validate_json(text)


def _go_string(text: str) -> str:
    """A JSON string escaped as Go's encoding/json does (and so Helm's toJson)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or ch in "<>&" or code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _go_float(value: float) -> str:
    """A float as Go's encoding/json writes it: shortest digits, plain notation unless the
    exponent is below -6 or from 21, an exponent without leading zeros."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"  # Go keeps the sign of zero
    if 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, _, exponent = repr(value).partition("e")
    sign = exponent[0] if exponent[0] in "+-" else "+"
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys, byte for byte what Go's json.Marshal (Helm's toJson)
    writes for the same data: the form that is hashed and carried in the manifest, so the
    Helm chart produces the same text and hash."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, str):
        return _go_string(obj)
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{obj} has no JSON form")
        return _go_float(obj)
    if isinstance(obj, dict):
        items = sorted(obj.items())
        return "{" + ",".join(f"{_go_string(k)}:{canonical_json(v)}" for k, v in items) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in obj) + "]"
    raise TypeError(f"{type(obj).__name__} is not JSON data")
