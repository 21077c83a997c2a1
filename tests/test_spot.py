"""Spot node pools and terminationGracePeriod: auto (spec/providers.py): what each preset
renders, the window a preempted pod gets, and what validate says."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_client import Client
from operator_client.client.grace import ESTIMATE_PATH, grace_warning, measured_budget
from operator_client.render import render
from operator_client.runstore import checkpoint_log
from operator_client.runstore.location import store_for
from operator_client.spec import SpecError, load_job_text
from operator_client.spec.providers import grace_seconds, save_window_seconds
from operator_client.spec.save_estimate import estimate


def job_text(
    pool: str, grace: str | None = None, gpus: int = 1, extra: str = "", nodes: str = "1"
) -> str:
    fault = f"  fault: {{terminationGracePeriod: {grace}}}\n" if grace else ""
    return (
        "apiVersion: kctl-train/v1alpha1\nkind: TrainingJob\nmetadata: {name: spotty}\n"
        "spec:\n  image: ghcr.io/acme/trainer:1.0\n  train: {model: pkg.mod:Model}\n"
        f"  nodes: {nodes}\n  resources: {{gpus: {gpus}}}\n  nodePool: {pool}\n{fault}"
        f"  storage: {{uri: s3://bucket/runs}}\n{extra}"
    )


def pod_spec(text: str) -> dict[str, Any]:
    manifest = render(load_job_text(text).job)
    replicas = manifest["spec"]["pytorchReplicaSpecs"]  # elastic jobs have Workers alone
    spec: dict[str, Any] = next(iter(replicas.values()))["template"]["spec"]
    return spec


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


@pytest.mark.parametrize(
    ("state_bytes", "nodes", "share_mib", "needs", "auto"),
    [
        # 7168 MiB a pod: 71.68 s in flight, then 7 s snapshot + 71.68 s, then 3 s to exit.
        (14 * 2**30, 2, 7168, 153.36, 231),
        (14 * 2**30, 1, 14336, 303.72, 456),
        (1, 1, 1, 3.02, 5),  # a byte still writes a MiB's worth: rounded up
        (0, 4, 0, 3.0, 5),
        (10**12, 3, 317892, 6671.28, 10007),  # 1T over 3 nodes, decimal suffix
    ],
)
def test_the_save_estimate_splits_the_state_over_the_nodes(
    state_bytes: int, nodes: int, share_mib: int, needs: float, auto: int
) -> None:
    found = estimate(state_bytes, nodes)
    assert found.share_mib == share_mib
    assert found.emergency_save_s == pytest.approx(needs, abs=0.05)
    assert found.auto_grace_seconds == auto
    # The integer arithmetic (the chart's) is 1.5 x the estimate, rounded up.
    assert found.auto_grace_seconds == math.ceil(1.5 * found.emergency_save_s - 1e-9)


@pytest.mark.parametrize(
    ("grace", "preset", "spot", "sized", "rendered"),
    [
        (None, "none", False, 231, 231),  # auto grows to hold the estimate
        (None, "gke", False, 50, 120),  # never below the default
        (None, "gke", True, 231, 30),  # a spot node goes at its notice: validate warns
        (60, "none", False, 231, 60),  # an explicit grace period is what renders
    ],
)
def test_auto_takes_the_estimate_where_no_provider_limit_bounds_it(
    grace: int | None, preset: str, spot: bool, sized: int, rendered: int
) -> None:
    assert grace_seconds(grace, preset, spot, sized) == rendered


@pytest.mark.parametrize(
    ("pool", "grace", "nodes", "says", "rendered"),
    [
        ("{preset: gke, spot: true}", "auto", "2", "the gke spot notice, 30s", 30),
        ("{preset: gke}", "auto", "2", None, 231),
        ("{preset: gke}", "60s", "2", "the 60s grace period", 60),
        ("{preset: gke}", "60s", "{min: 2, max: 8}", "the 60s grace period", 60),  # the fewest
        ("{preset: eks, spot: true}", "auto", "4", None, 120),  # 3584 MiB: 79 s fits 120 s
    ],
)
def test_validate_warns_when_the_estimate_does_not_fit_before_any_run(
    pool: str, grace: str, nodes: str, says: str | None, rendered: int
) -> None:
    text = job_text(pool, grace, nodes=nodes, extra="  checkpoint: {stateSize: 14Gi}\n")
    loaded = load_job_text(text)
    found = [w for w in loaded.warnings if w.path == ESTIMATE_PATH]
    assert pod_spec(text)["terminationGracePeriodSeconds"] == rendered
    if says is None:
        assert found == []
        return
    (warning,) = found
    assert "stateSize" in text.splitlines()[warning.line - 1], warning
    assert says in warning.message and "by estimate" in warning.message
    assert "the first save measures the real rates" in warning.message


def test_a_size_in_bytes_is_whole_and_says_how_to_write_a_fraction() -> None:
    with pytest.raises(SpecError, match=r"1\.5Gi is 1536Mi"):
        load_job_text(job_text("{preset: gke}", extra="  checkpoint: {stateSize: 1.5Gi}\n"))
    with pytest.raises(SpecError, match=r"spec\.checkpoint\.stateSize"):
        load_job_text(job_text("{preset: gke}", extra="  checkpoint: {stateSize: 100m}\n"))


def test_apply_replaces_the_estimate_with_the_measured_save(tmp_path: Path) -> None:
    text = job_text(
        "{preset: gke, spot: true}",
        "auto",
        gpus=0,
        extra="  checkpoint: {stateSize: 14Gi}\n",
    ).replace("s3://bucket/runs", f"file://{tmp_path / 'store'}")
    client = Client("local", home=tmp_path / "home")
    before = client.apply(text, dry_run="server")
    assert [w.path for w in before.warnings if w.path == ESTIMATE_PATH] == [ESTIMATE_PATH]
    job = load_job_text(text).job
    quick = {"step": "1", "stall_s": "0.5", "write_s": "2", "commit_s": "0.5", "bytes": "9"}
    checkpoint_log.write(store_for(job), [quick])  # 8 s measured: fits the 30 s notice
    (tmp_path / "store" / ".kctl-train-store").touch()  # as a run would have marked it
    after = client.apply(text, dry_run="server")
    assert not [w for w in after.warnings if "terminationGracePeriod" in w.path + w.message]
    assert not [w for w in after.warnings if w.path == ESTIMATE_PATH]


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
        ("{preset: gke, spot: true}", "5m", "the gke spot notice, 30s is shorter"),
        ("{preset: eks, spot: true}", "auto", None),  # 120 s holds it
        ("{preset: gke}", "10s", "the 10s grace period is shorter"),
        ("{preset: gke}", "auto", None),
    ],
)
def test_apply_warns_when_the_measured_save_does_not_fit_the_window(
    tmp_path: Path, pool: str, grace: str, says: str | None
) -> None:
    text = job_text(pool, grace).replace("s3://bucket/runs", f"file://{tmp_path}")
    job = load_job_text(text).job
    row = {"step": "1", "stall_s": "1", "write_s": "15", "commit_s": "0.5", "bytes": "9"}
    checkpoint_log.write(store_for(job), [row])  # 36 s with one in flight and the exit
    measured = measured_budget(job)
    assert measured is not None
    warning = grace_warning(job, measured, "job.yaml")
    if says is None:
        assert warning is None
        return
    assert warning is not None and says in warning.message, warning
    if "spot" in says:
        assert "nodePool.spot: false" in warning.message


@pytest.mark.parametrize(
    ("pool", "grace", "extra", "window"),
    [
        ("{preset: gke, spot: true}", "auto", "", 30),
        ("{preset: eks, spot: true}", "5m", "", 120),
        ("{preset: gke}", "auto", "", 120),
        ("{preset: gke}", "auto", "  checkpoint: {stateSize: 14Gi}\n", 456),  # 1 node
        ("{preset: gke}", "45s", "", 45),
        ("{preset: gke}", "45s", "  bogus: 1\n", None),  # not a job kctl-train wrote
    ],
)
def test_the_report_reads_the_window_the_run_had(
    tmp_path: Path, pool: str, grace: str, extra: str, window: int | None
) -> None:
    from operator_client.collect.report import _save_window

    doc = yaml.safe_load(job_text(pool, grace, extra=extra))
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"spec": doc}))
    assert _save_window(run_json) == window


def test_status_says_the_estimate_until_a_save_is_measured(tmp_path: Path) -> None:
    text = job_text(
        "{preset: gke, spot: true}", "auto", gpus=0, extra="  checkpoint: {stateSize: 14Gi}\n"
    )
    handle = Client("local", home=tmp_path / "home").apply(text, dry_run="client")
    found = handle.save_estimate()
    assert found == estimate(14 * 2**30, 1)
    said = found.against(handle.save_window())
    assert said.startswith("no save measured yet: an emergency save needs about 304s by estimate")
    assert said.endswith("a preempted pod has 30s: it does NOT fit: work would be lost")
    plain = Client("local", home=tmp_path / "home").apply(job_text("{preset: gke}", gpus=0),
                                                          dry_run="client")  # fmt: skip
    assert plain.save_estimate() is None
