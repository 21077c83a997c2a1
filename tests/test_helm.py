"""The Helm chart with the real Helm engine (helm-python-sdk bundles Helm v4's Go code):
for every example and for generated valid specs, the chart and the Python renderer produce
equal objects — the spec JSON in the pods and its hash included, byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operator_client import __version__
from operator_client.kubeflow.training_runtime import runtime
from operator_client.render import render
from operator_client.render.helm import default_values, values_schema
from operator_client.render.trainjob import RUNTIME_FILE
from operator_client.spec import SpecError, load_job_text

from .conftest import EXAMPLES, ROOT
from .crd import crd_errors
from .test_properties import valid_jobs

helm_python = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")

CHART = ROOT / "charts" / "kctl-train"
TEMPLATE = "kctl-train/templates/pytorchjob.yaml"
# Where the chart's output may differ from `kctl-train render` on purpose. None today: no
# helm.sh/chart label is added, so a job moved between Helm and kctl-train does not change.
INTENDED_DIFFERENCES: dict[str, str] = {}


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    loaded = helm_python.Chart.load(str(CHART))
    yield loaded
    loaded.close()


def values_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A job.yaml as chart values: its metadata beside, its spec pasted under `spec`."""
    meta = doc["metadata"]
    return {
        "name": meta["name"],
        "namespace": meta.get("namespace", "default"),
        "labels": meta.get("labels", {}),
        "annotations": meta.get("annotations", {}),
        "spec": doc["spec"],
    }


def helm_render(chart: Any, values: dict[str, Any]) -> dict[str, Any]:
    out = chart.render(values=values, name="release", namespace="default")
    rendered: dict[str, Any] = yaml.safe_load(out[TEMPLATE])
    return rendered


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_render_the_same_job_through_helm(chart: Any, path: Any) -> None:
    doc = yaml.safe_load(path.read_text())
    assert helm_render(chart, values_of(doc)) == render(load_job_text(path.read_text()).job)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_render_the_same_trainjob_through_helm(chart: Any, path: Any) -> None:
    """operator: trainjob through the chart: the same TrainJob, or a refusal where
    kctl-train refuses too."""
    from operator_client.spec import SpecError

    doc = yaml.safe_load(path.read_text())
    values = values_of(doc)
    values["spec"] = {**values["spec"], "operator": "trainjob"}
    try:
        expected = render(load_job_text(path.read_text(), operator="trainjob").job)
    except SpecError:
        with pytest.raises(helm_python.HelmError, match="a TrainJob cannot carry this job"):
            helm_render(chart, values)
        return
    assert helm_render(chart, values) == expected


# No control characters: Helm's YAML encoder refuses them (the chart then fails loudly,
# mustToYaml), and no real spec has them.
text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=8)
json_values = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(2**53), 2**53),  # Helm's numbers are float64
        st.floats(allow_nan=False, allow_infinity=False),
        text | st.sampled_from(["<b>&amp;", "naïve ✓", "tab\there", "\u2028"]),
    ),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)


@st.composite
def helm_jobs(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = draw(valid_jobs)
    spec = doc["spec"]
    if draw(st.booleans()):
        spec.pop("train", None)
        spec["command"] = draw(st.lists(text.filter(bool), min_size=1, max_size=3))
    else:
        spec["train"] = {
            "model": "pkg.mod:Model",
            **draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "modelArgs": st.dictionaries(text, json_values, max_size=3),
                        "data": st.just("pkg.mod:Data"),
                        "seed": st.integers(0, 2**31),
                    },
                )
            ),
        }
    extra = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "processesPerNode": st.sampled_from(["auto", "detect", 1, 4]),
                "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent"]),
                "imagePullSecrets": st.lists(
                    st.sampled_from(["regcred", "mirror"]), max_size=2, unique=True
                ),
                "serviceAccountName": st.sampled_from(["trainer", "irsa-role"]),
                "env": st.dictionaries(
                    st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), text, max_size=3
                ),
                "checkpoint": st.fixed_dictionaries(
                    {},
                    optional={
                        "every": st.sampled_from(["500 steps", "30m", "1h30m"]),
                        "stateSize": st.sampled_from(["14Gi", "800Mi", "2T", "1", "3Ei"]),
                    },
                ),
                "fault": st.fixed_dictionaries(
                    {"terminationGracePeriod": st.sampled_from(["auto", "45s"])}
                ),
            },
        )
    )
    spec.update(extra)
    if "storage" in spec and draw(st.booleans()):
        spec["storage"].update(
            endpoint="http://minio.storage:9000", region="eu-west-1", credentialsSecret="s3"
        )
    if draw(st.booleans()):
        spec.setdefault("nodePool", {})["tolerations"] = [
            {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"},
        ]
    return doc


@pytest.mark.parametrize("size", ["14Gi", "700G", "5Ti", "1"])
@pytest.mark.parametrize("nodes", [1, 3, {"min": 2, "max": 4}])
@pytest.mark.parametrize("spot", [False, True])
def test_auto_grace_from_the_state_size_is_the_same_through_helm(
    chart: Any, size: str, nodes: Any, spot: bool
) -> None:
    doc = yaml.safe_load((EXAMPLES[0]).read_text())
    spec = doc["spec"]
    spec.update(nodes=nodes, fault={"terminationGracePeriod": "auto"})
    spec.setdefault("checkpoint", {})["stateSize"] = size
    spec["nodePool"] = {"preset": "eks", "spot": spot}
    expected = render(load_job_text(yaml.safe_dump(doc)).job)
    assert helm_render(chart, values_of(doc)) == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(helm_jobs())
def test_generated_valid_specs_render_the_same_through_helm(
    chart: Any, doc: dict[str, Any]
) -> None:
    try:
        job = load_job_text(yaml.safe_dump(doc, allow_unicode=True)).job
    except SpecError:
        return  # cross-field rules: not a valid job (kctl-train validate says why)
    expected = render(job)
    assert helm_render(chart, values_of(json.loads(json.dumps(doc)))) == expected
    assert crd_errors(expected) == []


def test_generated_files_are_current() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema == values_schema(), "run: python -m operator_client.render.helm charts/kctl-train"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values == default_values(), (
        "run: python -m operator_client.render.helm charts/kctl-train"
    )
    shipped = yaml.safe_load((CHART / "files" / RUNTIME_FILE).read_text())
    assert shipped == runtime(), "run: python -m operator_client.render.helm charts/kctl-train"


def test_the_chart_installs_the_trainjob_runtime_on_request(chart: Any) -> None:
    values = yaml.safe_load((CHART / "ci/quickstart-values.yaml").read_text())
    out = chart.render(values=values, name="release", namespace="ml")
    assert not (out.get(RUNTIME_TEMPLATE) or "").strip()
    values["trainingRuntime"] = {"install": True}
    out = chart.render(values=values, name="release", namespace="ml")
    installed = yaml.safe_load(out[RUNTIME_TEMPLATE])
    assert installed == runtime() and crd_errors(installed) == []


RUNTIME_TEMPLATE = "kctl-train/templates/clustertrainingruntime.yaml"


def test_chart_metadata_follows_the_package() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == __version__
    assert default_values()["spec"]["image"].endswith(f":{__version__}")


def test_helm_lint_is_clean() -> None:
    ci_values = yaml.safe_load((CHART / "ci/quickstart-values.yaml").read_text())
    for values in (None, ci_values):
        result = helm_python.lint(str(CHART), values=values, strict=True)
        assert result["errors"] == [], result
        assert [m for m in result["messages"] if m["severity"] > 1] == [], result


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"command": ["x"], "nodes": 0}, "/spec/nodes"),
        ({"command": ["x"], "resources": {"gpus": -1}}, "/spec/resources/gpus"),
        ({"command": ["x"], "fault": {"restartPolicy": "Sometimes"}}, "/spec/fault/restartPolicy"),
        ({"command": ["x"], "nodePools": {}}, "nodePools"),
        ({}, "give spec.train.model"),
        ({"command": ["x"], "nodes": {"min": 4, "max": 2}}, "min 4 is above max 2"),
        ({"command": ["x"], "train": {"model": "a.b:C"}}, "not both"),
        (
            {"command": ["x"], "operator": "trainjob", "nodes": {"min": 1, "max": 2}},
            "a TrainJob cannot carry this job (docs/TRAINJOB.md): spec.nodes",
        ),
        ({"command": ["x"], "operator": "tfjob"}, "/spec/operator"),
    ],
)
def test_bad_values_are_rejected_naming_the_field(
    chart: Any, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm_python.HelmError) as info:
        chart.render(values={"name": "bad", "spec": spec}, name="release", namespace="default")
    assert message in str(info.value)


def test_service_account_for_workload_identity(chart: Any) -> None:
    values = yaml.safe_load((CHART / "ci/quickstart-values.yaml").read_text())
    values["serviceAccount"] = {
        "create": True,
        "annotations": {"iam.gke.io/gcp-service-account": "trainer@proj.iam.gserviceaccount.com"},
    }
    out = chart.render(values=values, name="release", namespace="ml")
    account = yaml.safe_load(out["kctl-train/templates/serviceaccount.yaml"])
    assert account["metadata"]["name"] == "quickstart"
    assert account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    job = yaml.safe_load(out[TEMPLATE])
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert (
        pod["serviceAccountName"] == "quickstart" and pod["automountServiceAccountToken"] is False
    )
    assert "kctl-train collect quickstart -n ml" in out["kctl-train/templates/NOTES.txt"]
