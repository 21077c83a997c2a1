"""Property-based tests: the loader only ever raises SpecError, and every job it accepts
renders deterministically into a manifest the CRD and the webhook accept."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operator_client.kubeflow.webhook import webhook_errors
from operator_client.render import render, to_yaml
from operator_client.spec import SpecError, load_job_text

from .crd import crd_errors

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**12),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["auto", "30m", "8Gi", "gke", "1e3"]),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.text(max_size=10),
                st.sampled_from(
                    ["spec", "nodes", "resources", "gpus", "metadata", "name", "min", "max", "env"]
                ),
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=20,
)


def check_loader(text: str) -> None:
    try:
        loaded = load_job_text(text, "fuzz.yaml")
    except SpecError as exc:
        assert exc.issues
        for issue in exc.issues:
            assert issue.message
            assert "\n" not in str(issue)
        return
    manifest = render(loaded.job)
    assert webhook_errors(manifest) == []


@SETTINGS
@given(st.text(max_size=300))
def test_random_text_only_raises_spec_errors(text: str) -> None:
    check_loader(text)


@SETTINGS
@given(documents)
def test_random_documents_only_raise_spec_errors(doc: Any) -> None:
    check_loader(yaml.safe_dump(doc))


base_job: dict[str, Any] = {
    "apiVersion": "kctl-train/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "fuzz"},
    "spec": {"image": "img:1", "train": {"model": "a.b:C"}},
}


@SETTINGS
@given(
    st.sampled_from(
        [
            "nodes",
            "resources",
            "nodePool",
            "network",
            "fault",
            "checkpoint",
            "storage",
            "env",
            "scheduling",
            "cleanup",
            "processesPerNode",
        ]
    ),
    documents,
)
def test_random_values_under_real_fields_only_raise_spec_errors(field: str, value: Any) -> None:
    doc = {**base_job, "spec": {**base_job["spec"], field: value}}
    check_loader(yaml.safe_dump(doc))


names = st.from_regex(r"[a-z][a-z0-9]{0,20}", fullmatch=True)
quantities = st.sampled_from(["1", "500m", "4", "16Gi", "512Mi", "1Ti"])
valid_jobs = st.fixed_dictionaries(
    {
        "apiVersion": st.just("kctl-train/v1alpha1"),
        "kind": st.just("TrainingJob"),
        "metadata": st.fixed_dictionaries(
            {"name": names},
            optional={"namespace": names, "labels": st.dictionaries(names, names, max_size=2)},
        ),
        "spec": st.fixed_dictionaries(
            {"image": st.just("ghcr.io/acme/trainer:1.0")},
            optional={
                "train": st.fixed_dictionaries({"model": st.just("pkg.mod:Model")}),
                "nodes": st.one_of(
                    st.integers(1, 16),
                    st.integers(1, 8).flatmap(
                        lambda lo: st.fixed_dictionaries(
                            {"min": st.just(lo), "max": st.integers(lo, 16)}
                        )
                    ),
                ),
                "resources": st.fixed_dictionaries(
                    {},
                    optional={
                        "gpus": st.integers(0, 8),
                        "cpu": quantities,
                        "memory": st.sampled_from(["16Gi", "1Ti"]),
                        "sharedMemory": st.sampled_from(["1Gi", "8Gi"]),
                        "gpuResource": st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"]),
                    },
                ),
                "nodePool": st.one_of(
                    st.fixed_dictionaries(
                        {"preset": st.just("gke"), "pool": names, "accelerator": names},
                        optional={"spot": st.booleans()},
                    ),
                    st.fixed_dictionaries(
                        {"preset": st.sampled_from(["eks", "aks"]), "pool": names},
                        optional={"spot": st.booleans()},
                    ),
                    st.fixed_dictionaries(
                        {"preset": st.just("karpenter"), "spot": st.booleans()},
                        optional={"nodeSelector": st.dictionaries(names, names, max_size=2)},
                    ),
                    st.fixed_dictionaries({"preset": st.just("gfd"), "accelerator": names}),
                    st.fixed_dictionaries({"nodeSelector": st.dictionaries(names, names)}),
                ),
                "network": st.fixed_dictionaries(
                    {"profile": st.sampled_from(["none", "efa", "infiniband"])},
                    optional={"devices": st.integers(1, 32)},
                ),
                "scheduling": st.fixed_dictionaries(
                    {},
                    optional={
                        "queue": names,
                        "priorityClassName": names,
                        "gang": st.sampled_from(["none", "volcano", "scheduler-plugins"]),
                    },
                ),
                "fault": st.fixed_dictionaries(
                    {},
                    optional={
                        "maxRestarts": st.integers(0, 10),
                        "backoffLimit": st.integers(0, 10),
                        "restartPolicy": st.sampled_from(["OnFailure", "ExitCode", "Never"]),
                        "activeDeadline": st.sampled_from(["1h", "72h", "90s"]),
                        "terminationGracePeriod": st.sampled_from(["auto", "10s", "5m"]),
                    },
                ),
                "storage": st.fixed_dictionaries(
                    {"uri": st.sampled_from(["s3://bucket/x", "file:///tmp/store"])}
                ),
                "env": st.dictionaries(
                    st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), names, max_size=3
                ),
                "cleanup": st.fixed_dictionaries(
                    {}, optional={"pods": st.sampled_from(["Running", "All", "None"])}
                ),
            },
        ),
    }
)


@SETTINGS
@given(valid_jobs)
def test_generated_jobs_render_valid_deterministic_manifests(doc: dict[str, Any]) -> None:
    doc["spec"].setdefault("train", {"model": "pkg.mod:Model"})
    text = yaml.safe_dump(doc)
    try:
        loaded = load_job_text(text)
    except SpecError as exc:
        # Generated values can still break cross-field rules; those must be named.
        assert all(i.path for i in exc.issues), exc
        return
    manifest = render(loaded.job)
    assert crd_errors(manifest) == []
    assert webhook_errors(manifest) == []
    assert to_yaml(render(load_job_text(text).job)) == to_yaml(manifest)
