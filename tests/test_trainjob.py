"""Rendering for Kubeflow Trainer v2.3 (spec.operator: trainjob): every example renders to a
TrainJob that the real CRD accepts with nothing pruned and that the admission rules accept,
deterministically and as its golden file says, or is refused with the reasons (also golden).
The kctl-train ClusterTrainingRuntime is generated, current, valid, and has what the TrainJob
patches. UPDATE_GOLDEN=1 rewrites the golden files after an intended change."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_client.controlplane import lifecycle as lc
from operator_client.controlplane.trainjob_pods import torch_nproc
from operator_client.controlplane.workload import WorkloadError, workload_of
from operator_client.kubeflow.kinds import PYTORCHJOB, TRAINJOB
from operator_client.kubeflow.training_runtime import runtime
from operator_client.kubeflow.webhook import admission_errors
from operator_client.render import render, to_yaml
from operator_client.render.trainjob import RUNTIME_FILE
from operator_client.spec import SpecError, load_job, load_job_text

from .conftest import EXAMPLES, ROOT, job_yaml
from .crd import crd_errors

GOLDEN = ROOT / "tests" / "golden" / "trainjob"
RUNTIME_MANIFEST = ROOT / "manifests" / "trainer-v2" / RUNTIME_FILE


def as_trainjob(example: Path) -> dict[str, Any] | list[str]:
    """The example's TrainJob, or the lines of its refusal."""
    try:
        return render(load_job(example, operator="trainjob").job)
    except SpecError as exc:  # positions relative to the repository: the same on any clone
        return [str(issue).removeprefix(f"{ROOT}/") for issue in exc.issues]


def check_golden(path: Path, text: str) -> None:
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run UPDATE_GOLDEN=1 make test"
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "now")
        )
        pytest.fail(f"differs from the golden file (UPDATE_GOLDEN=1 if intended):\n{diff}")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_each_example_renders_to_a_valid_trainjob_or_is_refused(example: Path) -> None:
    result = as_trainjob(example)
    if isinstance(result, list):
        assert result, "a refusal says why"
        check_golden(GOLDEN / f"{example.stem}.refused.txt", "\n".join(result) + "\n")
        return
    assert result["kind"] == "TrainJob"
    assert crd_errors(result) == []
    assert admission_errors(result) == []
    assert render(load_job(example, operator="trainjob").job) == result
    check_golden(GOLDEN / f"{example.stem}.yaml", to_yaml(result))


def test_the_examples_are_not_all_refused() -> None:
    rendered = [p.stem for p in EXAMPLES if not isinstance(as_trainjob(p), list)]
    assert {"quickstart", "gke-h100-4x8", "aks-a100"} <= set(rendered)


def test_the_runtime_manifest_is_generated_current_and_valid() -> None:
    committed = yaml.safe_load(RUNTIME_MANIFEST.read_text())
    assert committed == runtime(), (
        "run: python -m operator_client.render.trainjob manifests/trainer-v2"
    )
    assert crd_errors(committed) == []


def test_the_patch_touches_only_what_the_runtime_has() -> None:
    """Trainer's webhook refuses a patch of a replicated Job or container the runtime does
    not have, and any env patch on `node`."""
    job = render(load_job(ROOT / "examples" / "gke-h100-4x8.yaml", operator="trainjob").job)
    have = {
        rj["name"]: {c["name"] for c in rj["template"]["spec"]["template"]["spec"]["containers"]}
        for rj in runtime()["spec"]["template"]["spec"]["replicatedJobs"]
    }
    (patch,) = job["spec"]["runtimePatches"]
    for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
        assert rj["name"] in have
        for container in rj["template"]["spec"]["template"]["spec"].get("containers", []):
            assert container["name"] in have[rj["name"]] and "env" not in container


TRAIN = "  train: {model: a.b:C}\n"


def spec_of(body: str, name: str = "tj") -> str:
    return job_yaml(name, "  operator: trainjob\n" + TRAIN + body)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ("  nodes: {min: 1, max: 4}\n", "spec.nodes", "no elastic range"),
        ("  fault: {restartPolicy: Never}\n", "spec.fault.restartPolicy", "restart policy"),
        ("  fault: {backoffLimit: 2}\n", "spec.fault.backoffLimit", "backoffLimit"),
        ("  cleanup: {pods: All}\n", "spec.cleanup.pods", "cleanPodPolicy"),
        ("  cleanup: {ttlAfterFinished: 1h}\n", "spec.cleanup.ttlAfterFinished", "TTL"),
        (
            "  scheduling: {priorityClassName: hi}\n",
            "spec.scheduling.priorityClassName",
            "PriorityClass",
        ),
        ("  scheduling: {gang: volcano}\n", "spec.scheduling.gang", "podGroupPolicy"),
        ("  imagePullPolicy: Always\n", "spec.imagePullPolicy", "image pull policy"),
        ("  mountServiceAccountToken: true\n", "spec.mountServiceAccountToken", "API token"),
        (
            "  processesPerNode: detect\n"
            "  resources: {gpus: 1, gpuResource: nvidia.com/mig-1g.10gb}\n",
            "spec.processesPerNode",
            "give a number",
        ),
    ],
)
def test_what_a_trainjob_cannot_express_is_refused_at_its_field(
    body: str, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        load_job_text(spec_of(body))
    issues = [i for i in caught.value.issues if i.path == field]
    assert issues and words in issues[0].message and issues[0].line > 0, caught.value.issues


def test_the_default_values_of_runtime_fields_are_fine() -> None:
    """Written out at their defaults they change nothing the runtime does."""
    body = "  fault: {restartPolicy: OnFailure, backoffLimit: 6}\n  imagePullPolicy: IfNotPresent\n"
    assert load_job_text(spec_of(body)).job.spec.operator == "trainjob"


def test_the_name_leaves_room_for_jobsets_pod_names() -> None:
    """JobSet names pods `<name>-node-0-<index>-<5 characters>` (at most 63)."""
    with pytest.raises(SpecError, match="too long"):
        load_job_text(spec_of("  nodes: 10\n", name="a" * 49))
    load_job_text(spec_of("  nodes: 10\n", name="a" * 48))
    load_job_text(job_yaml("a" * 49, TRAIN + "  nodes: 10\n"))  # a PyTorchJob's pods are shorter


def test_the_operator_flag_replaces_the_files_operator(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(spec_of(""))
    assert render(load_job(path).job)["kind"] == "TrainJob"
    assert render(load_job(path, operator="pytorchjob").job)["kind"] == "PyTorchJob"


def test_the_operator_is_not_part_of_what_the_pods_run() -> None:
    """The same job as either kind carries the same spec (and spec hash) to its pods."""
    v1 = render(load_job_text(job_yaml("tj", TRAIN)).job)
    v2 = render(load_job_text(spec_of("")).job)
    hash_key = "kctl-train.io/spec-hash"
    assert v1["metadata"]["annotations"][hash_key] == v2["metadata"]["annotations"][hash_key]
    spec_env = next(e for e in v2["spec"]["trainer"]["env"] if e["name"] == "KCTL_TRAIN_SPEC")
    assert "operator" not in spec_env["value"]


def test_a_trainjobs_pods_are_the_runtime_patched_by_the_trainjob() -> None:
    """What the local backend runs for a TrainJob: the runtime's node pod, the TrainJob's
    runtimePatches and trainer applied, as Trainer v2.3 and JobSet build it."""
    manifest = as_trainjob(ROOT / "examples" / "gke-h100-4x8.yaml")
    assert isinstance(manifest, dict)
    workload = workload_of(manifest)
    name = manifest["metadata"]["name"]
    assert [p for p, _, _ in workload.pods()] == [f"{name}-node-0-{i}" for i in range(4)]
    assert workload.dns_names(f"{name}-node-0-2") == (
        f"{name}-node-0-2",
        f"{name}-node-0-2.{name}",
    )
    pod = workload.pod_spec("node")
    patch = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    patched = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure" and pod["subdomain"] == name  # runtime, JobSet
    assert pod["enableServiceLinks"] is False  # the runtime's, not patchable
    for field in ("nodeSelector", "tolerations", "terminationGracePeriodSeconds", "volumes"):
        assert pod[field] == patched[field], field  # the patch's
    container = workload.container("node")
    trainer = manifest["spec"]["trainer"]
    assert container["image"] == trainer["image"] and container["command"] == trainer["command"]
    assert container["resources"] == trainer["resourcesPerNode"]
    assert container["env"] == trainer["env"]
    assert container["imagePullPolicy"] == "IfNotPresent"  # the runtime's
    assert container["securityContext"] == patched["containers"][0]["securityContext"]
    env = workload.operator_env("node", 3)
    assert env == {
        "JOB_COMPLETION_INDEX": "3",
        "PET_NNODES": "4",
        "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
        "PET_NODE_RANK": "3",
        "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
        "PET_MASTER_PORT": "29500",
    }
    assert lc.Policy.of(workload).backoff_limit == 6


# pkg/runtime/framework/plugins/torch/torch.go (EnforceMLPolicy) and pkg/runtime/runtime.go
# (the GPU count) at v2.3.0; docs/TRAINJOB.md has the table.
GPU8 = {"requests": {"nvidia.com/gpu": "8"}}


@pytest.mark.parametrize(
    ("trainer", "runtime_resources", "expected"),
    [
        ({"numProcPerNode": 3, "resourcesPerNode": GPU8}, None, "3"),  # the TrainJob's wins
        ({"resourcesPerNode": GPU8}, None, "auto"),
        ({"resourcesPerNode": {"limits": {"amd.com/gpu": "1"}, "requests": {"cpu": "4"}}},
         {}, "auto"),
        ({"resourcesPerNode": {"requests": {"nvidia.com/gpu": "0", "cpu": "2"}}}, None, "2"),
        # a GPU request of 0 with a positive limit is a GPU
        ({"resourcesPerNode": {"requests": {"nvidia.com/gpu": "0"},
                               "limits": {"nvidia.com/gpu": "1"}}}, None, "auto"),
        ({"resourcesPerNode": {"limits": {"example.com/GPU": "2"}}}, None, "auto"),  # any case
        ({"resourcesPerNode": {"requests": {"cpu": "2500m"}}}, None, "3"),  # rounded up
        ({"resourcesPerNode": {"limits": {"cpu": "0.5"}}}, None, "1"),
        # a zero CPU request falls back to the limit
        ({"resourcesPerNode": {"requests": {"cpu": "0"}, "limits": {"cpu": "4"}}}, None, "4"),
        ({"resourcesPerNode": {"requests": {"cpu": "4", "habana.ai/gaudi": "8"}}}, None, "4"),
        ({"resourcesPerNode": {}}, None, "1"),
        # No resourcesPerNode: the runtime's node container's resources decide
        # (ExtractResourcePerNodeFromRuntime); none anywhere is 1, as the real torch
        # plugin sets on Kubeflow's torch-distributed (tests/fidelity).
        ({}, None, "1"),
        ({}, {"requests": {"cpu": "4"}}, "4"),
        ({}, GPU8, "auto"),
        ({"resourcesPerNode": {"requests": {"cpu": "2"}}}, GPU8, "2"),  # the TrainJob's replace
        ({"resourcesPerNode": {}}, GPU8, "1"),  # even an empty one
    ],
)  # fmt: skip
def test_processes_per_node_as_the_torch_plugin_computes_them(
    trainer: dict[str, Any], runtime_resources: dict[str, Any] | None, expected: str
) -> None:
    assert torch_nproc(trainer, runtime_resources) == expected


def test_a_trainjob_of_a_runtime_this_backend_lacks_is_refused() -> None:
    manifest = as_trainjob(ROOT / "examples" / "quickstart.yaml")
    assert isinstance(manifest, dict)
    manifest["spec"]["runtimeRef"]["name"] = "torch-distributed"
    with pytest.raises(WorkloadError, match="torch-distributed is not here"):
        workload_of(manifest)
    from operator_client.backends.local import LocalBackend

    (finding,) = LocalBackend(Path("/nonexistent")).check(manifest)
    assert finding.level == "error" and finding.bad_input
    assert "ClusterTrainingRuntime/kctl-train" in finding.message


@pytest.mark.parametrize(
    ("job", "pod", "tag"),
    [
        ("demo", "demo-node-0-1", "node-0-1"),  # local: the hostname
        ("demo", "demo-node-0-12-x7k2p", "node-0-12"),  # a cluster's JobSet pod
        ("node", "node-node-0-0-abcde", "node-0-0"),
    ],
)
def test_a_trainjob_pods_tag_is_its_hostname_within_the_job(job: str, pod: str, tag: str) -> None:
    assert TRAINJOB.tag(job, pod) == tag
    assert PYTORCHJOB.tag("demo", "demo-worker-3") == "worker-3"
    assert TRAINJOB.order(job, pod) < TRAINJOB.order(job, f"{job}-node-0-99")
