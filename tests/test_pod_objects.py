"""Secrets and ConfigMaps given to a local run as files (kubeflow/pod_objects.py), and what
the kubelet makes of a container's env and volumes with them (controlplane/pod_env.py,
sandbox/podspec.py), one row per rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operator_client.backends.local.sandbox.podspec import mounted_volumes
from operator_client.controlplane.pod_env import PodEnvError, resolve_env
from operator_client.kubeflow.manifest_files import ManifestFileError
from operator_client.kubeflow.pod_objects import PodObjects, load_objects

from .conftest import first_pod

OBJECTS = PodObjects(
    secrets={"creds": {"token": "t0k", "bad key": "x"}},
    configmaps={"app": {"mode": "fast", "level": "3"}},
)


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return resolve_env(container, pod_ip="10.0.0.2", objects=OBJECTS)


def ref(kind: str, name: str, key: str, optional: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "key": key}
    if optional:
        body["optional"] = True
    return {"name": "V", "valueFrom": {kind: body}}


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        ({"env": [ref("secretKeyRef", "creds", "token")]}, {"V": "t0k"}),
        ({"env": [ref("configMapKeyRef", "app", "mode")]}, {"V": "fast"}),
        # optional references to what is absent are left out
        ({"env": [ref("configMapKeyRef", "app", "nope", optional=True)]}, {}),
        ({"env": [ref("secretKeyRef", "other", "k", optional=True)]}, {}),
        # envFrom first (keys that are not variable names skipped), then env wins
        ({"envFrom": [{"secretRef": {"name": "creds"}}]}, {"token": "t0k"}),
        (
            {"envFrom": [{"configMapRef": {"name": "app"}, "prefix": "C_"}],
             "env": [{"name": "C_mode", "value": "slow"}]},
            {"C_mode": "slow", "C_level": "3"},
        ),
        ({"envFrom": [{"configMapRef": {"name": "gone", "optional": True}}]}, {}),
        ({"env": [{"name": "EMPTY"}]}, {"EMPTY": ""}),
    ],
)  # fmt: skip
def test_env_from_secrets_and_configmaps(container: dict[str, Any], expected: Any) -> None:
    assert env_of(container) == expected


@pytest.mark.parametrize(
    ("container", "error"),
    [
        ({"env": [ref("configMapKeyRef", "gone", "k")]},
         "CreateContainerConfigError: configmap 'gone' not found \\(give it with --configmap FILE"),
        ({"env": [ref("secretKeyRef", "creds", "nope")]},
         "CreateContainerConfigError: couldn't find key 'nope' in Secret 'creds'"),
        ({"envFrom": [{"secretRef": {"name": "gone"}}]},
         "CreateContainerConfigError: secret 'gone' not found"),
        ({"env": [{"name": "V", "valueFrom": {"resourceFieldRef": {}}}]}, "unsupported valueFrom"),
    ],
)  # fmt: skip
def test_what_cannot_be_resolved_says_what_to_give(container: dict[str, Any], error: str) -> None:
    with pytest.raises(PodEnvError, match=error):
        env_of(container)


def test_object_files_decode_and_name_their_faults(tmp_path: Path) -> None:
    good = tmp_path / "objects.yaml"
    good.write_text(
        "kind: Secret\nmetadata: {name: s}\ndata: {a: aGk=}\nstringData: {b: plain}\n---\n"
        "kind: Secret\nmetadata: {name: t}\n"
    )
    assert load_objects([good], []).secrets == {"s": {"a": "hi", "b": "plain"}, "t": {}}
    cm = tmp_path / "cm.yaml"
    cm.write_text("kind: ConfigMap\nmetadata: {name: c}\ndata: {x: '1'}\nbinaryData: {y: aGk=}\n")
    assert load_objects([], [cm]).configmaps == {"c": {"x": "1", "y": "hi"}}
    with pytest.raises(ManifestFileError, match="kind 'Secret' is not a ConfigMap"):
        load_objects([], [good])
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Secret\nmetadata: {name: s}\ndata: {a: '%%%'}\n")
    with pytest.raises(ManifestFileError, match=r"data\.a is not base64"):
        load_objects([bad], [])
    with pytest.raises(ManifestFileError, match="not a regular file"):
        load_objects([tmp_path], [])


def job_with(
    volumes: list[Any], mounts: list[Any], security: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec = {"volumes": volumes, "securityContext": security or {},
            "containers": [{"name": "pytorch", "image": "x", "volumeMounts": mounts}]}  # fmt: skip
    manifest = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": spec}}}},
    }  # fmt: skip
    return manifest


@pytest.mark.parametrize(
    ("volume", "mount", "error"),
    [
        ({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}, {},
         "is a persistentVolumeClaim"),
        ({"name": "v", "configMap": {"name": "gone"}}, {}, "configMap 'gone' is not here"),
        ({"name": "v", "hostPath": {"path": "/"}}, {}, "is a hostPath"),
        ({"name": "../../victim", "emptyDir": {}}, {},
         "volume name '../../victim' is not a valid name"),
        ({"name": "v", "secret": {"secretName": "creds", "items": [{"key": "token",
                                                                     "path": "../x"}]}},
         {}, "item path '../x' leaves it"),
    ],
)  # fmt: skip
def test_volumes_a_local_run_refuses(volume: Any, mount: Any, error: str) -> None:
    job = job_with([volume], [{"name": volume["name"], "mountPath": "/m", **mount}])
    with pytest.raises(ValueError, match=error):
        mounted_volumes(first_pod(job, "Master"), OBJECTS)


def test_volumes_a_local_run_mounts() -> None:
    job = job_with(
        [{"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o400,
                                  "items": [{"key": "token", "path": "t/tok"}]}},
         {"name": "e", "emptyDir": {}}],
        [{"name": "s", "mountPath": "/secrets"},
         {"name": "e", "mountPath": "/scratch"}],
        {"runAsUser": 0},
    )  # fmt: skip
    given = mounted_volumes(first_pod(job, "Master"), OBJECTS)
    assert [(v.target, v.files, v.mode) for v in given] == [("/secrets", {"t/tok": "t0k"}, 0o400)]


def test_processes_refuse_volumes_they_cannot_show(tmp_path: Path) -> None:
    """A plain process sees this machine's files: a pod's mounts need pod sandboxes."""
    from operator_client.backends.local import LocalBackend

    job = job_with(
        [{"name": "h", "secret": {"secretName": "creds"}}],
        [{"name": "h", "mountPath": "/data", "readOnly": True}],
    )
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    container["containers"][0]["command"] = ["python3"]
    backend = LocalBackend(tmp_path, pods="process", objects=OBJECTS)
    findings = backend.check(job)
    errors = [f.message for f in findings if f.level == "error"]
    assert any("volumes at /data need pod sandboxes" in e for e in errors), findings
