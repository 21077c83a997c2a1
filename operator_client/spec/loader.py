"""Load job.yaml into a TrainingJob, reporting every problem with file:line:column.

YAML is composed into nodes first (they carry positions), then constructed and
validated by the pydantic model; each validation error's field path is walked back
through the nodes to the position the user has to edit.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import EXIT_BAD_INPUT, KctlTrainError
from ..untrusted import UntrustedFileError, read_bytes
from .checks import FieldProblem, Loc, problems, warnings
from .document import MAX_BYTES, JobText
from .fields import control_character
from .issues import SpecIssue
from .model import TrainingJob

# Guards against alias bombs ("billion laughs") and huge inputs: far above any real
# job file, small enough that validating the largest input allowed takes well under 1 s.
MAX_NODES = 100_000
MAX_EXPANDED_CHARS = 4 << 20  # of all scalars after expanding aliases
_PLAIN_KEY = re.compile(r"[\w./-]+")


class SpecError(KctlTrainError):
    exit_code = EXIT_BAD_INPUT

    """A job file could not be loaded; `issues` lists every problem found."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        super().__init__("\n".join(str(i) for i in issues))
        self.issues = issues


@dataclass(frozen=True)
class LoadedJob:
    """A validated job and the warnings found while loading it."""

    job: TrainingJob
    source: str
    warnings: list[SpecIssue]


def load_job(path: str | Path, operator: str | None = None) -> LoadedJob:
    """Read and validate a job file; raises SpecError for any problem, with positions.
    `operator` replaces the file's spec.operator (the CLI's --operator)."""
    source = str(path)
    try:
        # A regular file only (a FIFO or /dev/zero would block or never end), and no
        # more of it than a job file may hold.
        data = read_bytes(Path(path), MAX_BYTES)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise _fail(source, "no such file") from None
    except PermissionError:
        raise _fail(source, "permission denied") from None
    except UnicodeDecodeError as exc:
        raise _fail(source, f"not UTF-8 text (byte {exc.start})") from None
    except UntrustedFileError as exc:
        if "larger than" in str(exc):
            raise _too_large(source, f"over {MAX_BYTES} bytes") from None
        if _what(exc) == "a directory":
            raise _fail(source, "is a directory, not a job file") from None
        raise _fail(source, f"{_what(exc)}: give a job file, or - for standard input") from None
    except OSError as exc:
        raise _fail(source, exc.strerror or str(exc)) from None
    return load_job_text(text, source, operator)


def load_job_text(text: str, source: str = "<string>", operator: str | None = None) -> LoadedJob:
    """Validate job YAML given as text; `source` names it in messages. `operator`
    replaces its spec.operator before validation, so the operator's rules apply."""
    if len(text) > MAX_BYTES:
        raise _too_large(source, f"{len(text)} characters")
    root = _compose(text, source)
    data = _construct(root, source)
    if operator is not None and isinstance(data, dict) and isinstance(data.get("spec"), dict):
        data["spec"]["operator"] = operator
    try:
        job = TrainingJob.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_validation_issues(exc, root, source)) from None
    errors = problems(job)
    if errors:
        raise SpecError(_issues(errors, root, source, "error"))
    return LoadedJob(job, source, _issues(warnings(job), root, source, "warning"))


def _too_large(source: str, size: str) -> SpecError:
    return _fail(
        source,
        f"job file too large ({size}, at most {MAX_BYTES}): the job travels to its pods in "
        "one environment variable (128 KiB); put data in the image or the store and pass "
        "its location",
    )


def _what(exc: UntrustedFileError) -> str:
    """What was found where a job file should be ("a FIFO", "a character device")."""
    return str(exc).split(": ", 1)[-1].removesuffix("; refusing to read it")


def _fail(source: str, message: str, mark: Any = None) -> SpecError:
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    return SpecError([SpecIssue(source, line, column, "", message)])


# libyaml composes about six times faster than PyYAML's pure Python, with the same marks.
_Composer = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose(text: str, source: str) -> yaml.Node:
    loader = None
    try:
        loader = _Composer(text)
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or "invalid YAML"
        if "expected a single document" in str(exc):
            problem = "more than one YAML document: put one TrainingJob in each file"
        raise _fail(source, f"YAML syntax error: {problem}", exc.problem_mark) from None
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        line, column = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
        raise SpecError(
            [
                SpecIssue(
                    source,
                    line,
                    column,
                    "",
                    f"YAML error: character {exc.character!r} is not allowed in YAML text",
                )
            ]
        ) from None
    except yaml.YAMLError as exc:
        raise _fail(source, f"YAML error: {exc}") from None
    except RecursionError:
        raise _fail(source, "YAML nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        raise _fail(
            source,
            "file is empty: expected a TrainingJob mapping (apiVersion, kind, metadata, spec)",
        )
    if not isinstance(root, yaml.MappingNode):
        found = "a list" if isinstance(root, yaml.SequenceNode) else f"a scalar {root.value!r}"
        raise _fail(
            source, f"expected a TrainingJob mapping at the top, found {found}", root.start_mark
        )
    _check_keys(root, source)
    return root


def _check_keys(root: yaml.Node, source: str) -> None:
    """Duplicate and non-string keys are errors YAML itself lets through silently."""
    found: list[SpecIssue] = []
    seen = chars = 0
    stack = [root]
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise _fail(
                source, f"document too large (over {MAX_NODES} nodes after expanding aliases)"
            )
        if isinstance(node, yaml.ScalarNode):
            chars += len(node.value)
            if chars > MAX_EXPANDED_CHARS:
                raise _fail(
                    source,
                    f"document too large (over {MAX_EXPANDED_CHARS} characters after "
                    "expanding aliases)",
                )
            problem = control_character(node.value)
            if problem:
                found.append(_at(source, node, f"contains a control character ({problem})"))
        if isinstance(node, yaml.MappingNode):
            keys: dict[str, yaml.Node] = {}
            for key, value in node.value:
                if key.tag == "tag:yaml.org,2002:merge":
                    stack.append(value)
                    continue
                if not isinstance(key, yaml.ScalarNode) or key.tag != "tag:yaml.org,2002:str":
                    shown = key.value if isinstance(key, yaml.ScalarNode) else "a collection"
                    found.append(_at(source, key, f"key {shown!r} must be a string (quote it)"))
                elif key.value in keys:
                    first = keys[key.value].start_mark.line + 1
                    found.append(
                        _at(source, key, f"duplicate key {key.value!r} (first at line {first})")
                    )
                else:
                    keys[key.value] = key
                    if problem := control_character(key.value):
                        found.append(
                            _at(source, key, f"key contains a control character ({problem})")
                        )
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    if found:
        raise SpecError(sorted(found, key=lambda i: (i.line, i.column)))


def _at(source: str, node: yaml.Node, message: str) -> SpecIssue:
    mark = node.start_mark
    return SpecIssue(source, mark.line + 1, mark.column + 1, "", message)


def _construct(root: yaml.Node, source: str) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        raise _fail(source, f"YAML error: {exc.problem}", exc.problem_mark) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise _fail(source, f"YAML error: {exc}") from None
    finally:
        loader.dispose()


def _locate(
    root: yaml.Node, loc: Loc, key_itself: bool = False
) -> tuple[yaml.Node, list[str | int], bool]:
    """The node a validation loc points at, the real document path to it, and whether the
    last segment names a key the document lacks (a missing field). With `key_itself`,
    point at the last key rather than its value (for unknown fields)."""
    node: yaml.Node = root
    path: list[str | int] = []
    for i, seg in enumerate(loc):
        last = i == len(loc) - 1
        if seg == "[key]":
            continue  # handled one step earlier: the node is already the key
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == seg), None)
            want_key = (last and key_itself) or loc[i + 1 : i + 2] == ("[key]",)
            if match is not None:
                node, path = match[0] if want_key else match[1], [*path, seg]
            elif last:
                return node, [*path, seg], True
            # else: a union tag pydantic adds to the loc; it has no place in the document
        elif isinstance(node, yaml.SequenceNode) and isinstance(seg, int) and seg < len(node.value):
            node, path = node.value[seg], [*path, seg]
    return node, path, False


def _format_path(path: Iterable[str | int]) -> str:
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif not _PLAIN_KEY.fullmatch(seg):
            out += f"[{json.dumps(seg)}]"  # keys with spaces, quotes or newlines stay one line
        else:
            out += f".{seg}" if out else seg
    return out


def _issues(
    found: list[FieldProblem], root: yaml.Node, source: str, severity: Literal["error", "warning"]
) -> list[SpecIssue]:
    out = []
    for f in found:
        node, path, _ = _locate(root, f.loc)
        mark = node.start_mark
        out.append(
            SpecIssue(
                source, mark.line + 1, mark.column + 1, _format_path(path), f.message, severity
            )
        )
    return out


def _validation_issues(exc: ValidationError, root: yaml.Node, source: str) -> list[SpecIssue]:
    merged: dict[tuple[int, int, str], list[str]] = {}
    for err in exc.errors(include_url=False):
        loc: Loc = tuple(err["loc"])
        node, path, missing = _locate(root, loc, key_itself=err["type"] == "extra_forbidden")
        message = _message(err, path, missing)
        mark = node.start_mark
        key = (mark.line + 1, mark.column + 1, _format_path(path))
        if message not in merged.setdefault(key, []):
            merged[key].append(message)
    return [
        SpecIssue(source, line, column, path, "; or ".join(messages))
        for (line, column, path), messages in sorted(merged.items())
    ]


def _message(err: Any, path: list[str | int], missing: bool) -> str:
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "extra_forbidden":
        # A key literally named like pydantic's "[key]" marker leaves no path behind.
        key = str(path[-1]) if path else str(err["loc"][-1])
        known = _known_fields(path[:-1])
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            return f"unknown field {key!r}; did you mean {close[0]!r}?"
        return f"unknown field {key!r} (allowed: {', '.join(known)})"
    if kind == "missing" or missing:
        return "required field is missing"
    if kind == "value_error":
        return str(msg).removeprefix("Value error, ")
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
        close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{msg} (got {value!r}){hint}"
    if kind == "string_pattern_mismatch":
        return f"{value!r} is not valid here: {_pattern_hint(path)}"
    if isinstance(value, (str, int, float, bool)) or value is None:
        return f"{msg} (got {value!r})"
    return f"{msg} (got a {_yaml_kind(value)})"


def _yaml_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


_PATTERN_HINTS = {
    "name": "use lowercase letters, digits and '-', starting with a letter and ending with "
    "a letter or digit (DNS-1035)",
    "namespace": "use lowercase letters, digits and '-' (DNS-1123 label)",
    "model": "write an import path like 'my_pkg.models:MyModule'",
    "data": "write an import path like 'my_pkg.data:MyDataModule'",
    "gpuResource": "write an extended resource name like nvidia.com/gpu, amd.com/gpu or "
    "nvidia.com/mig-1g.10gb",
    "resource": "write an extended resource name like vpc.amazonaws.com/efa",
    "uri": "write s3://bucket/prefix or file:///absolute/path",
    "endpoint": "write an http:// or https:// URL, e.g. http://minio.storage:9000",
    "image": "write an image reference without spaces, e.g. ghcr.io/acme/trainer:1.4.0",
}


def _pattern_hint(path: list[str | int]) -> str:
    field = next((str(s) for s in reversed(path) if isinstance(s, str)), "")
    if len(path) >= 2 and path[-2] == "env":
        return (
            "environment variable names use letters, digits and '_' and do not start with a digit"
        )
    return _PATTERN_HINTS.get(field, "use lowercase letters, digits and '-' (DNS-1123 label)")


def _known_fields(path: list[str | int]) -> list[str]:
    """The field names allowed at a document path, for "did you mean"."""
    current: list[Any] = [TrainingJob]
    for seg in path:
        nxt: list[Any] = []
        for t in current:
            if isinstance(t, type) and issubclass(t, BaseModel):
                for name, field in t.model_fields.items():
                    if (field.alias or name) == seg:
                        nxt.extend(_inner(field.annotation))
            elif typing.get_origin(t) in (list, dict):
                nxt.extend(_inner(typing.get_args(t)[-1]))
        current = nxt
    return sorted(
        {
            (f.alias or n)
            for t in current
            if isinstance(t, type) and issubclass(t, BaseModel)
            for n, f in t.model_fields.items()
        }
    )


def _inner(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _inner(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for arg in typing.get_args(annotation) for t in _inner(arg)]
    return [annotation]


def load_files(
    files: list[str], stdin: TextIO, operator: str | None = None
) -> tuple[list[LoadedJob], list[SpecIssue]]:
    """Load every file ('-': `stdin`); the jobs that loaded, and the errors of those that
    did not, plus one for each namespace/name that two files define."""
    jobs, errors = [], []
    for name in files:
        try:
            if name == "-":
                text = JobText.read(stdin)
                jobs.append(load_job_text(text.text, text.source, operator))
            else:
                jobs.append(load_job(name, operator))
        except SpecError as exc:
            errors.extend(exc.issues)
    seen: dict[tuple[str, str], str] = {}
    for loaded in jobs:
        key = (loaded.job.metadata.namespace, loaded.job.metadata.name)
        if key in seen:
            message = f"job {key[0]}/{key[1]} is also defined in {seen[key]}"
            errors.append(SpecIssue(loaded.source, 0, 0, "metadata.name", message))
        seen.setdefault(key, loaded.source)
    return jobs, errors
