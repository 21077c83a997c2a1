"""What `validate` finds in job files, as data: the jobs that loaded, every problem of
every file, a JSON report for machines and one line per valid job for people."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..kubeflow import pytorchjob as pj
from ..kubeflow import trainjob as tj

if TYPE_CHECKING:
    from ..spec import LoadedJob, SpecIssue


@dataclass(frozen=True)
class Validation:
    """The jobs of the files that loaded, and the errors of those that did not (two files
    defining one job among them)."""

    jobs: list[LoadedJob]
    errors: list[SpecIssue]

    @property
    def warnings(self) -> list[SpecIssue]:
        return [w for j in self.jobs for w in j.warnings]

    def to_json(self) -> dict[str, Any]:
        """`validate -o json`: valid or not, the jobs, every issue by file and position."""
        issues = sorted(self.errors + self.warnings, key=lambda i: (i.source, i.line, i.column))
        return {
            "valid": not self.errors,
            "jobs": [
                {
                    "file": j.source,
                    "name": j.job.metadata.name,
                    "namespace": j.job.metadata.namespace,
                }
                for j in self.jobs
            ],
            "issues": [asdict(i) for i in issues],
        }

    def lines(self) -> list[str]:
        """One line per job: `job.yaml: valid: default/train, 2 nodes, 8 x nvidia.com/gpu
        per node, as a PyTorchJob`."""
        return [_line(loaded) for loaded in self.jobs]


def _line(loaded: LoadedJob) -> str:
    job = loaded.job
    nodes = (
        f"{job.min_nodes}-{job.max_nodes} nodes (elastic)"
        if job.elastic
        else f"{job.max_nodes} node{'s' if job.max_nodes > 1 else ''}"
    )
    gpus = job.spec.resources.gpus
    hardware = f"{gpus} x {job.spec.resources.gpu_resource}" if gpus else "CPU"
    as_kind = (
        f"{tj.KIND} of runtime {tj.RUNTIME_KIND}/{tj.RUNTIME_NAME}"
        if job.spec.operator == "trainjob"
        else pj.KIND
    )
    return (
        f"{loaded.source}: valid: {job.metadata.namespace}/{job.metadata.name}, "
        f"{nodes}, {hardware} per node, as a {as_kind}"
    )
