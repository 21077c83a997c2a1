"""Pod Security admission of local pods (controlplane/pod_security.py, backends/local/admission.py):
the API server's checks and words, table by table; kctl-train's own jobs and runtime pass
restricted; Kubeflow's stock runtimes pass baseline; and a refusal stops `apply` and
`doctor` with exit 2 before anything runs."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_client.backends.local import LocalBackend
from operator_client.backends.local.admission import admission_findings, level_of, unhonoured
from operator_client.controlplane import pod_security as pss
from operator_client.controlplane.pod_plan import plan_of
from operator_client.errors import BadInput
from operator_client.render import render
from operator_client.spec import SpecError, load_job

from .conftest import ROOT
from .test_trainer_runtimes import KCTL, RUNTIMES, TORCH, runtime, trainjob

EXAMPLES = sorted(Path("examples").glob("*.yaml"))
RESTRICTED_OK: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
}  # fmt: skip


def with_(spec: dict[str, Any], **container: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    out["containers"][0]["securityContext"].update(container)
    return out


# (level, pod spec, the refusal's detail after 'violates PodSecurity "<level>:latest": ')
CASES = [
    ("baseline", {"hostNetwork": True, "hostPID": True, "containers": [{"name": "c"}]},
     "host namespaces (hostNetwork=true, hostPID=true)"),
    ("baseline", {"containers": [{"name": "c", "securityContext": {"privileged": True}}]},
     'privileged (container "c" must not set securityContext.privileged=true)'),
    ("baseline", {"containers": [{"name": "c", "securityContext": {
        "capabilities": {"add": ["SYS_ADMIN", "CHOWN", "NET_RAW"]}}}]},
     'non-default capabilities (container "c" must not include "NET_RAW", "SYS_ADMIN" in '
     "securityContext.capabilities.add)"),
    ("baseline", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                  "containers": [{"name": "c"}]},
     'hostPath volumes (volume "root")'),
    ("baseline", {"containers": [{"name": "a", "ports": [{"hostPort": 80}]},
                                 {"name": "b", "ports": [{"hostPort": 8080}]}]},
     'hostPort (containers "a", "b" use hostPorts 80, 8080)'),
    ("baseline", {"containers": [{"name": "c", "securityContext": {"procMount": "Unmasked"}}]},
     'procMount (container "c" must not set securityContext.procMount to "Unmasked")'),
    ("baseline", {"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                  "containers": [{"name": "c"}]},
     'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")'),
    ("baseline", {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                                  {"name": "net.ipv4.tcp_syncookies"}]},
                  "containers": [{"name": "c"}]},
     "forbidden sysctls (kernel.msgmax)"),
    ("baseline", {"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u"}},
                  "containers": [{"name": "c"}]},
     'seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "spc_t"; user '
     "may not be set)"),
    ("baseline", {"containers": [{"name": "c", "securityContext": {
        "appArmorProfile": {"type": "Unconfined"}}}]},
     'forbidden AppArmor profile (container "c" must not set AppArmor profile type to '
     '"Unconfined")'),
    ("baseline", {"hostNetwork": True, "containers": [{"name": "c", "securityContext": {
        "privileged": True}}]},
     'host namespaces (hostNetwork=true), privileged (container "c" must not set '
     "securityContext.privileged=true)"),
    ("restricted", {"containers": [{"name": "c"}]},
     'allowPrivilegeEscalation != false (container "c" must set '
     'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container '
     '"c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or '
     'container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or '
     'container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
     '"Localhost")'),
    ("restricted", {**RESTRICTED_OK, "securityContext": {
        **RESTRICTED_OK["securityContext"], "runAsUser": 0}},
     "runAsUser=0 (pod must not set runAsUser=0)"),
    ("restricted", {**with_(RESTRICTED_OK, runAsNonRoot=False)},
     'runAsNonRoot != true (container "c" must not set securityContext.runAsNonRoot=false)'),
    ("restricted", {**RESTRICTED_OK, "volumes": [{"name": "n", "nfs": {}},
                                                 {"name": "e", "emptyDir": {}}]},
     'restricted volume types (volume "n" uses restricted volume type "nfs")'),
    ("restricted", with_(RESTRICTED_OK, capabilities={"drop": ["ALL"], "add": ["CHOWN"]}),
     'unrestricted capabilities (container "c" must not include "CHOWN" in '
     "securityContext.capabilities.add)"),
]  # fmt: skip


@pytest.mark.parametrize(("level", "spec", "detail"), CASES)
def test_the_api_servers_checks_and_words(level: str, spec: dict[str, Any], detail: str) -> None:
    assert pss.refusal("p", {}, spec, level) == (
        f'pods "p" is forbidden: violates PodSecurity "{level}:latest": {detail}'
    )


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": [{"name": "c", "securityContext": {"runAsUser": 0}}]},
        {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["CHOWN"]}}}]},
        {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]},
         "containers": [{"name": "c"}]},
        RESTRICTED_OK,
    ],
)  # fmt: skip
def test_baseline_admits_what_it_allows(spec: dict[str, Any]) -> None:
    assert pss.refusal("p", {}, spec, "baseline") is None


def test_a_user_namespace_relaxes_what_the_api_server_relaxes() -> None:
    spec = {**with_(RESTRICTED_OK, runAsUser=0, runAsNonRoot=False), "hostUsers": False}
    assert pss.refusal("p", {}, spec, "restricted") is None
    assert unhonoured(spec) == []  # every local pod has a user namespace of its own


def test_privileged_is_never_a_local_level(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BadInput, match="never privileged"):
        level_of("privileged")
    monkeypatch.setenv("KCTL_TRAIN_POD_SECURITY", "restricted")
    assert level_of(None) == "restricted"


def test_the_kubelet_refuses_runasnonroot_with_uid_0() -> None:
    spec = {"containers": [{"name": "c", "securityContext": {"runAsNonRoot": True,
                                                            "runAsUser": 0}}]}  # fmt: skip
    assert pss.kubelet_refusal("p", "ns", spec, 10001) == (
        'container\'s runAsUser breaks non-root policy (pod: "p_ns", container: c)'
    )
    image_root = {"securityContext": {"runAsNonRoot": True}, "containers": [{"name": "c"}]}
    assert "image will run as root" in str(pss.kubelet_refusal("p", "ns", image_root, 0))
    assert pss.kubelet_refusal("p", "ns", image_root, 10001) is None


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("operator", ["pytorchjob", "trainjob"])
def test_kctl_trains_own_jobs_pass_restricted(example: Path, operator: str) -> None:
    try:
        manifest = render(load_job(example, operator=operator).job)
    except SpecError as exc:
        first = str(exc).splitlines()[0].split(": error: ", 1)[-1]
        pytest.skip(f"{example.name} is for a PyTorchJob only: {first}")
    plan = plan_of(manifest, level="restricted", default_uid=10001)
    errors = [f for f in admission_findings(plan) if f.level == "error"]
    if "IPC_LOCK" in yaml.safe_dump(manifest):
        # RDMA needs IPC_LOCK, which baseline refuses too: these pools' namespaces are
        # privileged (the real API server says the same: tests/e2e/test_cluster.py).
        assert errors and all("IPC_LOCK" in e.message for e in errors), errors
    else:
        assert errors == [], errors


@pytest.mark.parametrize("path", [TORCH, *sorted(RUNTIMES.glob("*.yaml"))], ids=lambda p: p.stem)
def test_kubeflows_stock_runtimes_pass_baseline(path: Path) -> None:
    jobs = runtime(path)["spec"]["template"]["spec"]["replicatedJobs"]
    for job in jobs:
        pod = job["template"]["spec"]["template"]
        assert pss.refusal("p", pod.get("metadata") or {}, pod["spec"], "baseline") is None


def hostile_runtime(tmp_path: Path, patch: dict[str, Any]) -> Path:
    """Kubeflow's torch-distributed runtime with `patch` merged into its trainer pod."""
    found = copy.deepcopy(runtime(TORCH))
    jobs = found["spec"]["template"]["spec"]["replicatedJobs"]
    node = next(j for j in jobs if j["name"] == "node")
    pod = node["template"]["spec"]["template"]["spec"]
    for key, value in patch.items():
        if key == "container":
            pod["containers"][0].update(value)
        else:
            pod[key] = value
    path = tmp_path / "runtime.yaml"
    path.write_text(yaml.safe_dump(found))
    return path


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        ({"volumes": [{"name": "host", "hostPath": {"path": "/"}}],
          "container": {"volumeMounts": [{"name": "host", "mountPath": "/host"}]}},
         'violates PodSecurity "baseline:latest": hostPath volumes (volume "host")'),
        ({"container": {"securityContext": {"privileged": True}}},
         'violates PodSecurity "baseline:latest": privileged'),
        ({"container": {"securityContext": {"runAsUser": 0, "runAsNonRoot": True}}},
         "CreateContainerConfigError: container's runAsUser breaks non-root policy"),
        ({"hostPID": True}, "host namespaces (hostPID=true)"),
    ],
)  # fmt: skip
def test_a_hostile_runtime_is_refused_before_anything_runs(
    tmp_path: Path, patch: dict[str, Any], says: str
) -> None:
    path = hostile_runtime(tmp_path, patch)
    job = tmp_path / "tj.yaml"
    job.write_text(yaml.safe_dump(trainjob("torch-distributed", trainer={
        "image": "x", "command": ["python3", "-c", "print(1)"], "numNodes": 1})))  # fmt: skip
    home = tmp_path / "home"
    for command in ("apply", "doctor"):
        run = subprocess.run(
            [KCTL, command, str(job), "--local", "--runtime", str(path)],
            capture_output=True,
            text=True,
            env={"KCTL_TRAIN_HOME": str(home), "PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert run.returncode == 2, (command, run.stdout, run.stderr)
        assert says in run.stdout + run.stderr, (command, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
    assert not (home / "local").exists() or not any((home / "local").rglob("manifest.json"))


def test_restricted_is_chosen_per_run(tmp_path: Path) -> None:
    found = runtime(TORCH)
    manifest = trainjob("torch-distributed", trainer={"image": "x", "command": ["true"]})
    backend = LocalBackend(
        tmp_path, pod_security="restricted", runtimes={"torch-distributed": found}
    )
    errors = [f.message for f in backend.check(manifest) if f.level == "error"]
    assert any('violates PodSecurity "restricted:latest"' in e for e in errors), errors


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}},
         "securityContext.sysctls"),
        ({"securityContext": {"supplementalGroups": [5]}}, "supplementalGroups"),
        ({"securityContext": {"runAsUser": 10001, "fsGroup": 2000}}, "fsGroup 2000"),
        ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["CHOWN"]}}}]},
         "capabilities.add ['CHOWN']"),
        ({"containers": [{"name": "c", "securityContext": {"seLinuxOptions": {"level": "s0"}}}]},
         "seLinuxOptions"),
        ({"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}},
         "Localhost seccomp profile"),
    ],
)  # fmt: skip
def test_what_a_sandbox_cannot_honour_is_named(spec: dict[str, Any], named: str) -> None:
    assert any(named in why for why in unhonoured(spec)), unhonoured(spec)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"containers": [{"name": "node"}, {"name": "sidecar"}]}, "containers ['sidecar']"),
        ({"containers": [{"name": "node"}], "initContainers": [{"name": "preflight"}]},
         "initContainers ['preflight']"),
    ],
)  # fmt: skip
def test_containers_besides_the_main_one_are_named(spec: dict[str, Any], named: str) -> None:
    """A local pod runs one container: the others would silently not run."""
    assert any(named in why for why in unhonoured(spec, "node")), unhonoured(spec, "node")
    assert unhonoured({"containers": [{"name": "node"}]}, "node") == []


def test_kctl_trains_own_security_context_is_honoured_whole() -> None:
    from operator_client.kubeflow.security import container_security_context, pod_security_context

    container = {"name": "c", "securityContext": container_security_context()}
    spec = {"securityContext": pod_security_context(), "containers": [container]}
    assert unhonoured(spec) == []


NAMESPACE_LEVELS = [
    (None, False),
    ("privileged", False),
    ("baseline", True),
    ("restricted", True),
]


@pytest.mark.parametrize(("level", "refused"), NAMESPACE_LEVELS)
@pytest.mark.parametrize("example", ["eks-elastic-efa", "aks-a100"])
def test_the_cluster_preflight_applies_the_namespaces_enforce_label(
    level: str | None, refused: bool, example: str
) -> None:
    """The Kubernetes preflight checks a PyTorchJob's pods at the level its namespace
    enforces; only the RDMA example adds IPC_LOCK, which baseline and restricted refuse."""
    from operator_client.backends.kubernetes.preflight import admission_findings as cluster

    manifest = render(load_job(ROOT / "examples" / f"{example}.yaml").job)
    labels = {} if level is None else {"pod-security.kubernetes.io/enforce": level}
    namespace = {"metadata": {"name": "ns", "labels": labels}}
    found = cluster(namespace, manifest)
    if refused and example == "eks-elastic-efa":
        (finding,) = found
        assert finding.level == "error" and finding.bad_input
        assert finding.message.startswith(
            f'pods "llm-pretrain-worker-0" is forbidden: violates PodSecurity "{level}:latest": '
        )
        assert "IPC_LOCK" in finding.message
        assert f"namespace ns enforces Pod Security {level!r}" in finding.message
    else:
        assert found == []
