"""Spot node pools and terminationGracePeriod: auto (spec/providers.py): what each preset
renders, the window a preempted pod gets, and what validate says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operator_client.client.grace import grace_warning
from operator_client.render import render
from operator_client.runstore import checkpoint_log
from operator_client.runstore.location import store_for
from operator_client.spec import SpecError, load_job_text
from operator_client.spec.providers import grace_seconds, save_window_seconds


def job_text(pool: str, grace: str | None = None, gpus: int = 1) -> str:
    fault = f"  fault: {{terminationGracePeriod: {grace}}}\n" if grace else ""
    return (
        "apiVersion: kctl-train/v1alpha1\nkind: TrainingJob\nmetadata: {name: spotty}\n"
        "spec:\n  image: ghcr.io/acme/trainer:1.0\n  train: {model: pkg.mod:Model}\n"
        f"  resources: {{gpus: {gpus}}}\n  nodePool: {pool}\n{fault}"
        "  storage: {uri: s3://bucket/runs}\n"
    )


def pod_spec(text: str) -> dict:
    manifest = render(load_job_text(text).job)
    return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


@pytest.mark.parametrize(
    ("grace", "preset", "spot", "rendered", "window"),
    [
        (None, "gke", True, 30, 30),
        (None, "aks", True, 30, 30),
        (None, "eks", True, 120, 120),
        (None, "karpenter", True, 120, 120),
        (None, "gke", False, 120, 120),  # auto without spot: the default
        (None, "none", False, 120, 120),
        (300, "gke", True, 300, 30),  # the node goes at the notice whatever was asked
        (60, "eks", True, 60, 60),
        (10, "none", False, 10, 10),
    ],
)
def test_the_grace_period_and_the_window_a_preempted_pod_gets(
    grace: int | None, preset: str, spot: bool, rendered: int, window: int
) -> None:
    assert grace_seconds(grace, preset, spot) == rendered
    assert save_window_seconds(grace, preset, spot) == window


@pytest.mark.parametrize(
    ("pool", "selector", "toleration"),
    [
        ("{preset: gke, spot: true}", {"cloud.google.com/gke-spot": "true"}, True),
        ("{preset: aks, spot: true}", {"kubernetes.azure.com/scalesetpriority": "spot"}, True),
        ("{preset: eks, spot: true}", {"eks.amazonaws.com/capacityType": "SPOT"}, False),
        ("{preset: karpenter, spot: true}", {"karpenter.sh/capacity-type": "spot"}, False),
        # The raw nodeSelector is merged after the preset's, as for every preset label.
        (
            "{preset: eks, spot: true, nodeSelector: {eks.amazonaws.com/capacityType: ON_DEMAND}}",
            {"eks.amazonaws.com/capacityType": "ON_DEMAND"},
            False,
        ),
    ],
)
def test_spot_selects_the_presets_spot_nodes(
    pool: str, selector: dict[str, str], toleration: bool
) -> None:
    spec = pod_spec(job_text(pool, "auto"))
    assert spec["nodeSelector"] == selector
    ((key, value),) = selector.items()
    spot_taint = {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}
    assert (spot_taint in spec["tolerations"]) is toleration


def test_auto_renders_the_spot_notice_and_the_default_elsewhere() -> None:
    assert (
        pod_spec(job_text("{preset: gke, spot: true}", "auto"))["terminationGracePeriodSeconds"]
        == 30
    )
    assert pod_spec(job_text("{preset: gke}", "auto"))["terminationGracePeriodSeconds"] == 120
    # Without spot nothing about the pod changes: no label, no toleration but the GPU's.
    plain = pod_spec(job_text("{preset: gke}"))
    assert "nodeSelector" not in plain
    assert plain["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_spot_without_a_cloud_preset_is_refused_saying_which_presets_know_it() -> None:
    with pytest.raises(SpecError) as caught:
        load_job_text(job_text("{preset: gfd, spot: true}"))
    message = str(caught.value)
    assert "spec.nodePool.spot" in message
    assert "gke, eks, aks, karpenter" in message
    assert "nodeSelector" in message


def test_a_grace_period_longer_than_the_spot_notice_is_warned_about() -> None:
    loaded = load_job_text(job_text("{preset: gke, spot: true}", "5m"))
    (warning,) = [w for w in loaded.warnings if w.path == "spec.fault.terminationGracePeriod"]
    assert "300s" in warning.message and "30s after its notice" in warning.message
    assert "auto" in warning.message
    quiet = load_job_text(job_text("{preset: gke, spot: true}", "auto"))
    assert not [w for w in quiet.warnings if w.path == "spec.fault.terminationGracePeriod"]


@pytest.mark.parametrize(
    ("pool", "grace", "says"),
    [
        # 36 s measured: the GKE spot notice (30 s) cuts a 5 m grace period to too little.
        ("{preset: gke, spot: true}", "5m", "30s, the gke spot notice, is shorter"),
        ("{preset: eks, spot: true}", "auto", None),  # 120 s holds it
        ("{preset: gke}", "10s", "10s is shorter"),
        ("{preset: gke}", "auto", None),
    ],
)
def test_apply_warns_when_the_measured_save_does_not_fit_the_window(
    tmp_path: Path, pool: str, grace: str, says: str | None
) -> None:
    text = job_text(pool, grace).replace("s3://bucket/runs", f"file://{tmp_path}")
    job = load_job_text(text).job
    measured = {"step": "1", "stall_s": "1", "write_s": "15", "commit_s": "0.5", "bytes": "9"}
    checkpoint_log.write(store_for(job), [measured])  # 36 s with one in flight and the exit
    warning = grace_warning(job, "job.yaml")
    if says is None:
        assert warning is None
        return
    assert warning is not None and says in warning.message, warning
    if "spot" in says:
        assert "nodePool.spot: false" in warning.message


@pytest.mark.parametrize(
    ("spec", "window"),
    [
        (
            {
                "fault": {"terminationGracePeriod": "auto"},
                "nodePool": {"preset": "gke", "spot": True},
            },
            30,
        ),
        (
            {
                "fault": {"terminationGracePeriod": "5m"},
                "nodePool": {"preset": "eks", "spot": True},
            },
            120,
        ),
        ({"fault": {"terminationGracePeriod": "auto"}, "nodePool": {"preset": "gke"}}, 120),
        ({"fault": {"terminationGracePeriod": "45s"}}, 45),
        ({"fault": {"terminationGracePeriod": 45}}, None),  # not what kctl-train writes
        ({}, None),
    ],
)
def test_the_report_reads_the_window_the_run_had(
    tmp_path: Path, spec: dict, window: int | None
) -> None:
    from operator_client.collect.report import _save_window

    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"spec": {"spec": spec}}))
    assert _save_window(run_json) == window
