"""No traceback for any input: whatever a hand-written (or generated) TrainJob, runtime,
Secret or ConfigMap holds where the controllers or the local backend read, the answer is the
API server's refusal, a WorkloadError or ManifestFileError naming what is wrong, or pods and
values, never an exception of another kind."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from operator_client.controlplane.pod_plan import plan_of
from operator_client.controlplane.workload import WorkloadError
from operator_client.kubeflow.manifest_files import ManifestFileError
from operator_client.kubeflow.pod_objects import load_objects
from operator_client.kubeflow.webhook import admission_errors

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
        plan = plan_of(manifest, {"torch-distributed": runtime(TORCH)})
    except WorkloadError:
        return
    assert plan.objects


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
        plan = plan_of(manifest, {"torch-distributed": found})
    except WorkloadError:
        return
    assert plan.objects


# A Secret or ConfigMap manifest with anything where the reader looks.
KEY = st.text(max_size=6) | st.integers() | st.booleans()
OBJECT_VALUE = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | RUNTIME_JSON
OBJECT = st.fixed_dictionaries(
    {"kind": st.sampled_from(["Secret", "ConfigMap", "Pod", 3])},
    optional={
        "apiVersion": st.just("v1"),
        "metadata": st.fixed_dictionaries({}, optional={"name": OBJECT_VALUE}) | OBJECT_VALUE,
        "data": st.dictionaries(KEY, OBJECT_VALUE, max_size=3) | OBJECT_VALUE,
        "stringData": st.dictionaries(KEY, OBJECT_VALUE, max_size=3),
        "binaryData": st.dictionaries(st.text(max_size=6), st.text(max_size=8), max_size=2),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(OBJECT, max_size=3), st.sampled_from(["secret", "configmap"]), st.booleans())
def test_any_secret_or_configmap_file_is_read_or_refused(
    tmp_path_factory: pytest.TempPathFactory, docs: list[Any], which: str, raw: bool
) -> None:
    """`--secret FILE` / `--configmap FILE`: values, or a ManifestFileError naming the
    file; never another exception."""
    path = tmp_path_factory.mktemp("objects") / "objects.yaml"
    text = yaml.safe_dump_all(docs)
    path.write_text(text[: len(text) // 2] if raw else text)  # half a file: broken YAML
    try:
        found = load_objects(
            [path] if which == "secret" else [], [path] if which != "secret" else []
        )
    except ManifestFileError as exc:
        assert str(path) in str(exc)
        return
    for values in [*found.secrets.values(), *found.configmaps.values()]:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
