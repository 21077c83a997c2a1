"""The API server's refusals of a pod spec (controlplane/pod_validation.py), table-driven; the
real server's words for each are in tests/fidelity/golden (gen-pj-08, gen-pj-12, gen-tj-07,
tj-patch-env-helper)."""

from __future__ import annotations

from typing import Any

import pytest

from operator_client.controlplane.pod_validation import pod_spec_errors
from operator_client.controlplane.trainjob_admission import runtime_errors
from operator_client.controlplane.trainjob_pods import env_var


def pod(**container: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "i", **container}]}


@pytest.mark.parametrize(
    ("spec", "errors"),
    [
        (pod(), []),
        (pod(resources={"limits": {"cpu": "1", "nvidia.com/gpu": 2}}), []),
        (pod(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "250m"}}),
         ['spec.containers[0].resources.requests: Invalid value: "2": must be less than or '
          "equal to cpu limit of 250m"]),
        (pod(resources={"requests": {"nvidia.com/gpu": 1}}),
         ["spec.containers[0].resources.limits: Required value: Limit must be set for non "
          "overcommitable resources"]),
        (pod(resources={"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 2}}),
         ['spec.containers[0].resources.requests: Invalid value: "8": must be equal to '
          "nvidia.com/gpu limit of 2"]),
        (pod(env=[{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]),
         ['spec.containers[0].env[0].valueFrom: Invalid value: "": may not be specified when '
          "`value` is not empty"]),
        ({"containers": [{"name": "c"}]}, ["spec.containers[0].image: Required value"]),
        (pod(volumeMounts=[{"name": "v", "mountPath": "/v"}]),
         ['spec.containers[0].volumeMounts[0].name: Not found: "v"']),
        ({**pod(volumeMounts=[{"name": "v", "mountPath": "/v"}]),
          "volumes": [{"name": "v", "emptyDir": {}, "configMap": {"name": "m"}}]},
         ["spec.volumes[0].configMap: Forbidden: may not specify more than 1 volume type",
          'spec.containers[0].volumeMounts[0].name: Not found: "v"']),
    ],
)  # fmt: skip
def test_what_the_api_server_refuses_in_a_pod(spec: dict[str, Any], errors: list[str]) -> None:
    assert pod_spec_errors(spec) == errors


FIELD = {"fieldRef": {"apiVersion": "v1", "fieldPath": "x"}}
RESOURCE = {"resourceFieldRef": {"resource": "limits.cpu", "containerName": ""}}
SECRET = {"secretKeyRef": {"name": "s", "key": "k", "optional": False}}


@pytest.mark.parametrize(
    ("entry", "copied"),
    [
        ({"name": "A", "value": "1"}, {"name": "A", "value": "1"}),
        ({"name": "A"}, {"name": "A", "value": ""}),
        ({"name": "A", "value": "1", "valueFrom": FIELD},
         {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}),
        ({"name": "A", "valueFrom": RESOURCE},
         {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}),
        ({"name": "A", "valueFrom": SECRET}, {"name": "A", "valueFrom": SECRET}),
    ],
)  # fmt: skip
def test_trainer_copies_env_as_apply_env_var_does(
    entry: dict[str, Any], copied: dict[str, Any]
) -> None:
    assert env_var(entry) == copied


def job(step: str | None, container: str, replicas: int = 1) -> dict[str, Any]:
    labels = {"trainer.kubeflow.org/trainjob-ancestor-step": step} if step else {}
    pod = {"spec": {"containers": [{"name": container, "image": "i"}]}}
    return {
        "name": "j",
        "replicas": replicas,
        "template": {"metadata": {"labels": labels}, "spec": {"template": pod}},
    }


@pytest.mark.parametrize(
    ("jobs", "errors"),
    [
        ([job("trainer", "node"), job(None, "anything", replicas=2)], []),
        ([job("trainer", "worker")],
         ["spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers: Invalid "
          "value: ['worker']: must contain the required container for the ancestor: trainer"]),
        ([job("dataset-initializer", "dataset-initializer", replicas=2)],
         ["spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1"]),
    ],
)  # fmt: skip
def test_the_runtime_webhook_rules(jobs: list[dict[str, Any]], errors: list[str]) -> None:
    runtime = {"spec": {"template": {"spec": {"replicatedJobs": jobs}}}}
    assert runtime_errors(runtime) == errors
