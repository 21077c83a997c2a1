"""No traceback for any TrainJob: whatever a hand-written (or generated) TrainJob holds where
the controllers read, the local backend answers with the API server's refusal, its own
WorkloadError, or pods, never an exception of another kind."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operator_client.kubeflow.pod_manifests import pod_manifests
from operator_client.kubeflow.webhook import admission_errors
from operator_client.kubeflow.workload import WorkloadError, workload_of

from ..test_trainer_runtimes import TORCH, runtime

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70) | st.text("abcm0-9.:/ ", max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["name", "value", "cpu", "limits", "x"]), inner, max_size=3
        )
    ),
    max_leaves=8,
)
FIELDS = {
    "trainer": st.dictionaries(
        st.sampled_from(
            ["image", "command", "args", "env", "numNodes", "numProcPerNode", "resourcesPerNode"]
        ),
        JSON,
        max_size=4,
    )
    | JSON,
    "runtimeRef": st.just({"name": "torch-distributed"}) | JSON,
    "suspend": JSON,
    "runtimePatches": JSON,
}


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional=FIELDS))
def test_any_trainjob_is_refused_or_becomes_pods(spec: dict[str, Any]) -> None:
    manifest = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "fuzz", "namespace": "default"},
        "spec": copy.deepcopy(spec),
    }
    if admission_errors(manifest):
        return
    try:
        workload = workload_of(manifest, {"torch-distributed": runtime(TORCH)})
    except WorkloadError:
        return
    assert pod_manifests(workload)


RUNTIME_FIELDS = ["name", "template", "spec", "containers", "replicas", "parallelism", "torch"]
RUNTIME_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 5) | st.text("ab", max_size=3),
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(RUNTIME_FIELDS), inner, max_size=3)
    ),
    max_leaves=6,
)
# Where a runtime file may hold anything: a path of keys into the runtime, then the value.
PLACES = {
    "mlPolicy": ("spec", "mlPolicy"),
    "template": ("spec", "template"),
    "replicatedJobs": ("spec", "template", "spec", "replicatedJobs"),
    "job spec": ("spec", "template", "spec", "replicatedJobs", 0, "template", "spec"),
    "containers": (
        "spec", "template", "spec", "replicatedJobs", 0, "template", "spec", "template", "spec",
        "containers",
    ),
}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(PLACES)), RUNTIME_JSON)
def test_any_runtime_is_refused_or_gives_pods(place: str, value: Any) -> None:
    found = copy.deepcopy(runtime(TORCH))
    *path, last = PLACES[place]
    target: Any = found
    for key in path:
        target = target[key]
    target[last] = value
    manifest = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "fuzz", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "x"}},
    }
    try:
        workload = workload_of(manifest, {"torch-distributed": found})
    except WorkloadError:
        return
    assert pod_manifests(workload)
