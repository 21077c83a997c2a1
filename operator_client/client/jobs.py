"""A job as the client takes it: a path, YAML text (JobText: with the name its messages
give it, such as <stdin>), a dict or a TrainingJob, validated into one LoadedJob (with the
same positions and messages as a job file)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadInput
from ..spec.document import MAX_BYTES
from ..spec.document import JobText as JobText  # one of the forms a JobInput takes

if TYPE_CHECKING:
    from ..spec import LoadedJob
    from ..spec.model import TrainingJob

    JobInput = str | os.PathLike[str] | Mapping[str, Any] | TrainingJob | JobText


def load(job: JobInput, source: str | None = None, operator: str | None = None) -> LoadedJob:
    """Validate `job`: a TrainingJob as it is; a mapping as the document it is; JobText,
    or a string with a line break, as YAML text; any other string or path as a file name.
    `operator` replaces its spec.operator (validated again for that operator). SpecError
    lists every problem."""
    from ..spec import LoadedJob, load_job, load_job_text
    from ..spec.model import TrainingJob

    if isinstance(job, TrainingJob):
        if operator is None or operator == job.spec.operator:
            return LoadedJob(job, source or f"<job {job.metadata.name}>", [])
        job = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(job, Mapping):
        # JSON is YAML: the loader's checks (sizes, control characters) apply alike.
        return load_job_text(json.dumps(job), source or "<dict>", operator)
    if isinstance(job, JobText):
        return load_job_text(job.text, source or job.source, operator)
    if isinstance(job, str) and "\n" in job:
        return load_job_text(job, source or "<string>", operator)
    if isinstance(job, str | os.PathLike):
        return load_job(Path(job), operator)
    raise BadInput(f"a job is a path, YAML text, a dict or a TrainingJob, not {type(job).__name__}")


def trainjob_manifest(job: JobInput) -> dict[str, Any] | None:
    """`job` as a TrainJob object when it is one (apiVersion trainer.kubeflow.org/...,
    kind TrainJob: written by hand or by the Kubeflow SDK), to apply as it is; None for a
    job file, which `load` validates."""
    from ..kubeflow import trainjob as tj
    from ..untrusted import UntrustedFileError, read_bytes

    data: Any = job
    if isinstance(job, JobText):
        data = _yaml(job.text)
    elif isinstance(job, str) and "\n" in job:
        data = _yaml(job)
    elif isinstance(job, str | os.PathLike):
        try:
            data = _yaml(read_bytes(Path(job), MAX_BYTES).decode("utf-8"))
        except (OSError, UntrustedFileError, UnicodeDecodeError):
            return None  # load() reports it
    if not isinstance(data, Mapping) or data.get("kind") != tj.KIND:
        return None
    if data.get("apiVersion") != tj.API_VERSION or not isinstance(data.get("metadata"), Mapping):
        return None
    copy: dict[str, Any] = json.loads(json.dumps(data))  # a plain copy the caller may change
    return copy


def _yaml(text: str) -> Any:
    """The YAML document in `text`; None where it is not one (load() says why)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def with_namespace(loaded: LoadedJob, namespace: str | None, force: bool) -> TrainingJob:
    """The job in `namespace` (None: its own). A namespace the file names is only
    replaced with `force`, as kubectl refuses a conflicting -n."""
    job = loaded.job
    if not namespace or namespace == job.metadata.namespace:
        return job
    if "namespace" in job.metadata.model_fields_set and not force:
        raise BadInput(
            f"{loaded.source}: metadata.namespace is {job.metadata.namespace!r} but "
            f"-n says {namespace!r}; drop -n, change the file, or --force-namespace"
        )
    return job.model_copy(
        update={"metadata": job.metadata.model_copy(update={"namespace": namespace})}
    )


def object_in_namespace(manifest: dict[str, Any], namespace: str | None) -> None:
    """A Kubeflow object given as it is, moved into `namespace` (None: its own). One that
    names another namespace is refused, as kubectl refuses it: a rendered object also
    carries its namespace inside (the spec its pods read places the run in the store), so
    moving it would store the run under the other namespace's path."""
    meta = manifest["metadata"]
    own = meta.get("namespace")
    if namespace and own and own != namespace:
        raise BadInput(
            f"{manifest['kind']} {meta.get('name')}: metadata.namespace is {own!r} but -n "
            f"says {namespace!r}; drop -n, or render the job for {namespace!r} "
            "(metadata.namespace in its job file)"
        )
    if namespace:
        meta["namespace"] = namespace
