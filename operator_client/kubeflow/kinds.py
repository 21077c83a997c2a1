"""The two job kinds kctl-train submits, as the API knows them: where each lives, how its
pods are found and named, and what kubectl calls it (`pytorchjob/NAME`,
`trainjob.trainer.kubeflow.org/NAME`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import pytorchjob as pj
from . import trainjob as tj

# JobSet's pod labels (v0.12): the JobSet (= TrainJob) and the replicated Job.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    container: str  # the trainer container, whose log and exit code are the replica's
    job_label: str  # the pod label whose value is the job's name

    @property
    def short(self) -> str:
        """kubectl's name for one: pytorchjob/NAME."""
        return self.kind.lower()

    @property
    def resource(self) -> str:
        """kubectl's full name, as `kubectl apply` prints it: pytorchjob.kubeflow.org."""
        return f"{self.short}.{self.group}"

    def pod_selector(self, name: str) -> str:
        """The label selector of one job's trainer pods."""
        if self.kind == tj.KIND:
            return f"{self.job_label}={name},{REPLICATED_JOB_LABEL}={tj.REPLICATED_JOB}"
        return f"{self.job_label}={name}"

    def tag(self, job: str, pod: str) -> str:
        """A pod's name within its job, the same on every backend: `worker-1`, or a
        TrainJob's `node-0-1` (a cluster's pod `<job>-node-0-1-x7k2p` loses its suffix)."""
        rest = pod.removeprefix(f"{job}-")
        if self.kind == tj.KIND:
            found = re.fullmatch(rf"({tj.REPLICATED_JOB}-0-\d+)(-[a-z0-9]{{5}})?", rest)
            return found.group(1) if found else rest
        return rest

    def order(self, job: str, pod: str) -> tuple[int, int]:
        """Pods in rank order: Master first, then by index."""
        tag = self.tag(job, pod)
        role, _, index = tag.rpartition("-")
        return (0 if role == "master" else 1, int(index) if index.isdigit() else 0)


PYTORCHJOB = Kind(pj.KIND, pj.GROUP, pj.VERSION, pj.PLURAL, pj.CONTAINER_NAME, pj.JOB_NAME_LABEL)
TRAINJOB = Kind(tj.KIND, tj.GROUP, tj.VERSION, tj.PLURAL, tj.CONTAINER_NAME, JOBSET_NAME_LABEL)
KINDS = (PYTORCHJOB, TRAINJOB)


def kind_of(obj: Mapping[str, Any] | str) -> Kind:
    """The Kind of an object (or of a kind's name); a PyTorchJob when it says nothing."""
    name = obj if isinstance(obj, str) else obj.get("kind")
    return TRAINJOB if name == tj.KIND else PYTORCHJOB
