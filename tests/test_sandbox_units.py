"""The pure pieces of pod sandboxes, table-driven: what a pod is made of (podspec), which
store endpoints are relayed, the network's names and addresses, the pod description's
round trip."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from operator_client.backends.local.sandbox.network import PodNetwork
from operator_client.backends.local.sandbox.podspec import (
    Bind,
    EmptyDir,
    PodSandbox,
    Volume,
    emptydirs,
    hosts_file,
    identity,
    memory_limit,
)
from operator_client.backends.local.sandbox.relay import loopback_port
from operator_client.backends.local.sandbox.support import PROCESS, choose
from operator_client.controlplane.pod_plan import plan_of
from operator_client.render import render
from operator_client.spec.loader import load_job

from .conftest import first_pod, job_yaml


def manifest(tmp_path: Path, body: str = "") -> dict[str, Any]:
    path = tmp_path / "job.yaml"
    path.write_text(job_yaml("pods", "  command: [sleep, '1']\n  nodes: 3\n" + body))
    return render(load_job(path).job)


@pytest.mark.parametrize(
    ("resources", "tmp", "shm", "limit"),
    [
        ("{memory: 2Gi, sharedMemory: 256Mi}", 2 << 30, 256 << 20, 2 << 30),
        ("{memory: 512Mi, sharedMemory: 64Mi}", 512 << 20, 64 << 20, 512 << 20),
        ("{memory: 3G, sharedMemory: 1Gi}", 3 * 10**9, 1 << 30, 3 * 10**9),
    ],
)
def test_emptydirs_and_the_memory_limit_come_from_the_manifest(
    tmp_path: Path, resources: str, tmp: int, shm: int, limit: int
) -> None:
    job = manifest(tmp_path, f"  resources: {resources}\n")
    for replica_type in ("Master", "Worker"):
        pod = first_pod(job, replica_type)
        assert set(emptydirs(pod)) == {
            EmptyDir("tmp", "/tmp", tmp),
            EmptyDir("dshm", "/dev/shm", shm),
        }
        assert memory_limit(pod) == limit


@pytest.mark.parametrize(
    ("pod", "container", "expected"),
    [
        (None, None, (10001, 10001, True)),  # as rendered
        ({"runAsUser": 2000}, {}, (2000, 10001, True)),  # the pod's runAsGroup stays
        ({}, {"runAsUser": 3000, "runAsGroup": 3001}, (3000, 3001, True)),  # the container wins
        ({}, {"readOnlyRootFilesystem": False}, (10001, 10001, False)),
    ],
)
def test_identity_follows_the_security_contexts(
    tmp_path: Path, pod: dict[str, Any] | None, container: dict[str, Any] | None,
    expected: tuple[int, int, bool],
) -> None:  # fmt: skip
    job = manifest(tmp_path)
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    if pod is not None:
        template["securityContext"].update(pod)
    if container is not None:
        template["containers"][0]["securityContext"].update(container)
    assert identity(first_pod(job, "Worker")) == expected


def test_hosts_name_every_pod() -> None:
    text = hosts_file({"j-worker-0": "10.213.1.3", "j-master-0": "10.213.1.2"})
    assert text.splitlines()[0] == "127.0.0.1\tlocalhost"
    assert "10.213.1.2\tj-master-0" in text and "10.213.1.3\tj-worker-0" in text


@pytest.mark.parametrize(
    ("endpoint", "port"),
    [
        ("http://127.0.0.1:9000", 9000),
        ("http://localhost:4566/", 4566),
        ("https://127.0.0.2", 443),
        ("http://[::1]:9000", 9000),
        ("http://minio.storage:9000", None),
        ("https://s3.eu-west-1.amazonaws.com", None),
        (None, None),
    ],
)
def test_only_loopback_endpoints_are_relayed(endpoint: str | None, port: int | None) -> None:
    assert loopback_port(endpoint) == port


def test_network_names_fit_linux_and_addresses_are_the_jobs_own(tmp_path: Path) -> None:
    pods = [f"job-worker-{i}" for i in range(64)]
    net = PodNetwork.plan(tmp_path / "a-job", pods)
    assert net.subnet.subnet_of(ipaddress.IPv4Network("10.213.0.0/16"))
    assert len({net.address(p) for p in pods}) == 64
    assert all(ipaddress.IPv4Address(net.address(p)) in net.subnet for p in pods)
    # .0 is the network, .1 stays free: the bridge has no address of this machine's.
    assert str(net.subnet.network_address + 1) not in {net.address(p) for p in pods}
    names = [net.bridge] + [net.veth(p) for p in pods] + [net.netns(p) for p in pods]
    assert max(len(n) for n in names) <= 15  # IFNAMSIZ - 1
    assert PodNetwork.of(tmp_path / "a-job", pods).veth(pods[5]) == net.veth(pods[5])
    assert PodNetwork.plan(tmp_path / "another", pods).key != net.key


def test_a_pod_description_survives_its_json() -> None:
    pod = PodSandbox(
        pod="j-master-0", netns="/run/netns/x", rootfs="/", stage="/s", uid=10001, gid=10001,
        read_only_root=True, empty_dirs=(Volume("/e/tmp", "/tmp"),), binds=(Bind("/store", True),),
        files={"/etc/hosts": "/h"}, workdir="/w", memory_limit=1 << 30, env={"A": "1"},
        command=("kctl-train-runtime",),
    )  # fmt: skip
    assert PodSandbox.from_json(pod.to_json()) == pod


def test_process_mode_on_request() -> None:
    mode = choose(PROCESS, "http://127.0.0.1:9000")
    assert not mode.sandboxed and "KCTL_TRAIN_LOCAL_PODS=process" in mode.describe()


def test_hosts_name_a_trainjob_pod_as_its_hostname_and_under_the_jobset_service(
    tmp_path: Path,
) -> None:
    plan = plan_of(manifest(tmp_path, "  operator: trainjob\n"))
    text = hosts_file({"pods-node-0-1": "10.213.1.3"}, {p.name: p.dns_names for p in plan.pods})
    assert "10.213.1.3\tpods-node-0-1 pods-node-0-1.pods" in text
