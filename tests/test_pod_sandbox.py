"""Pod sandboxes for real (docs/LOCAL_PODS.md): each replica of a local job in its own
network, mount, PID, UTS and IPC namespaces, as the pod's user with no capabilities, on
a read-only root with tmpfs emptyDirs that outlive its containers, under its memory
limit. Runs where this machine can make namespaces (root); CI runs as root, so there it
always runs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from operator_client.backends.local import pod_processes
from operator_client.backends.local.sandbox import support
from operator_client.backends.local.sandbox.network import PodNetwork

from . import written
from .test_local_backend import job_file, kctl, running, status_of

WHY_NOT = support.why_not()
pytestmark = pytest.mark.skipif(
    WHY_NOT is not None, reason=f"pod sandboxes are not possible here: {WHY_NOT}"
)

# What a process inside a replica sees, printed as one JSON line.
PROBE = r"""
import errno, getpass, json, os, socket
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return line.split()[1]
def fstype(path):
    found = None
    for line in open("/proc/self/mounts"):
        dev, point, kind, opts = line.split()[:4]
        if point == path:
            found = [kind, opts]
    return found
try:
    open("/kctl-probe", "w")
    root = "writable"
except OSError as exc:
    root = errno.errorcode[exc.errno]
try:
    user = getpass.getuser()
except Exception as exc:
    user = type(exc).__name__
job = os.environ["PROBE_JOB"]
facts = {
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "root": root,
    "tmp": fstype("/tmp"), "shm": fstype("/dev/shm"), "home": os.environ.get("HOME"),
    "pod_ip": os.environ["KCTL_TRAIN_POD_IP"], "hostname": socket.gethostname(),
    "master": socket.gethostbyname(job + "-master-0"), "pid1": open("/proc/1/cmdline").read(),
    "cap_eff": status("CapEff"), "cap_bnd": status("CapBnd"), "cap_inh": status("CapInh"),
    "no_new_privs": status("NoNewPrivs"), "user": user,
}
os.write(1, ("FACTS " + json.dumps(facts) + "\n").encode())  # one write: no interleaving
"""


def sandbox_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment with a home of the test's own; the machine, not a
    KCTL_TRAIN_LOCAL_PODS of the caller, decides how the replicas run."""
    env = {**os.environ, "KCTL_TRAIN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    env.pop(support.MODE_ENV, None)
    return env


def facts_of(log: Path) -> dict[str, Any]:
    for line in log.read_text().splitlines():
        if "FACTS {" in line:  # not the agent's echo of the command
            found: dict[str, Any] = json.loads(line.split("FACTS ", 1)[1])
            return found
    raise AssertionError(f"no FACTS line in {log}:\n{log.read_text()[-2000:]}")


def test_a_replica_runs_as_a_pod_would(tmp_path: Path) -> None:
    env = sandbox_env(tmp_path)
    path = job_file(
        tmp_path,
        "probe",
        "  command: [python, -c, " + json.dumps(PROBE) + "]\n"
        "  nodes: 2\n  processesPerNode: 1\n"
        "  env: {PROBE_JOB: probe}\n"
        "  resources: {cpu: '1', memory: 1Gi, sharedMemory: 64Mi}\n",
    )
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0 and "(local, pod sandboxes)" in out.stdout, out.stderr
    out = kctl("wait", "probe", "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    body = status_of("probe", env, tmp_path)
    local = body["local"]
    assert local["mode"] == "sandbox" and local["memoryLimits"] == "enforced (memory and CPU)"
    addresses = {r["name"]: r["address"] for r in local["replicas"]}
    logs = tmp_path / "home/local/default/probe/logs"
    for name, address in addresses.items():
        facts = facts_of(logs / f"{name}.log")
        assert (facts["uid"], facts["gid"], facts["groups"]) == (10001, 10001, [])
        assert facts["root"] == "EROFS"  # readOnlyRootFilesystem
        assert facts["tmp"][0] == "tmpfs" and "rw" in facts["tmp"][1].split(",")
        assert facts["shm"][0] == "tmpfs" and "size=65536k" in facts["shm"][1]  # sizeLimit
        assert facts["home"] == "/tmp"
        assert facts["pod_ip"] == address and not address.startswith("127.")
        assert facts["master"] == addresses["probe-master-0"]  # the Service name resolves
        assert facts["hostname"] == name
        assert "kctl-train-runtime" in facts["pid1"]  # the container's command is PID 1
        assert facts["cap_eff"] == facts["cap_bnd"] == facts["cap_inh"] == "0000000000000000"
        assert facts["no_new_privs"] == "1"
        # uid 10001 has no passwd entry here; the runtime names it, so getuser() works.
        assert facts["user"] == "uid-10001"
    # Everything the job made on this machine is gone with it.
    key = PodNetwork.plan(tmp_path / "home/local/default/probe", []).key
    assert (
        f"kt{key}"
        not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    )
    assert not any(
        n.startswith(f"kt{key}") for n in os.listdir("/run/netns") if os.path.isdir("/run/netns")
    )


def test_the_memory_limit_is_enforced_and_named(tmp_path: Path) -> None:
    env = sandbox_env(tmp_path)
    hog = "x = bytearray(700 * 2**20); x[::4096] = b'1' * len(x[::4096]); print('SUR' + 'VIVED')"
    path = job_file(
        tmp_path,
        "hog",
        f"  command: [python, -c, {json.dumps(hog)}]\n"
        "  resources: {cpu: '1', memory: 400Mi, sharedMemory: 64Mi}\n"
        "  fault: {restartPolicy: Never, maxRestarts: 0}\n",
    )
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = kctl("wait", "hog", "--local", env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "OOMKilled" in out.stdout + out.stderr
    log = (tmp_path / "home/local/default/hog/logs/hog-master-0.log").read_text()
    assert "SURVIVED" not in log


def test_a_pod_reads_its_own_memory_limit_where_a_container_would(tmp_path: Path) -> None:
    """The pod's memory cgroup is mounted read-only at /sys/fs/cgroup, as containerd
    mounts a container's: the runtime sizes checkpoint staging against that limit."""
    env = sandbox_env(tmp_path)
    probe = (
        "from operator_client.runtime.memory import pod_memory; import os; m = pod_memory(); "
        "print('LIMIT', m and m.limit, 'USED', m and m.used > 0); "
        "print('WRITABLE', os.access('/sys/fs/cgroup', os.W_OK))"
    )
    path = job_file(
        tmp_path,
        "limits",
        f"  command: [python, -c, {json.dumps(probe)}]\n"
        "  resources: {cpu: '1', memory: 400Mi, sharedMemory: 64Mi}\n"
        "  fault: {restartPolicy: Never, maxRestarts: 0}\n",
    )
    out = kctl("apply", str(path), "--local", "--wait", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    log = (tmp_path / "home/local/default/limits/logs/limits-master-0.log").read_text()
    assert f"LIMIT {400 * 2**20} USED True" in log, log
    assert "WRITABLE False" in log, log


# Each container of the pod lists what the earlier ones left in /tmp and adds its own;
# the first then waits to be killed, a later one ends the job.
RESTARTED = r"""
import os, time
earlier = sorted(n for n in os.listdir("/tmp") if n.startswith("probe-run-"))
print("EARLIER", earlier, flush=True)
open(f"/tmp/probe-run-{len(earlier)}", "w").close()
if not earlier:
    time.sleep(300)
"""


def test_an_emptydir_outlives_a_container_restarted_in_place(tmp_path: Path) -> None:
    """As under the kubelet, a container restarted in place (OnFailure, after every
    process of the pod was killed) finds what the last one wrote to the pod's emptyDirs;
    they go with the pod when the job ends."""
    env = sandbox_env(tmp_path)
    path = job_file(tmp_path, "again", f"  command: [python, -c, {json.dumps(RESTARTED)}]\n")
    assert kctl("apply", str(path), "--local", env=env, cwd=tmp_path).returncode == 0
    jobdir = tmp_path / "home/local/default/again"
    log = jobdir / "logs/again-master-0.log"
    try:
        wait_for(lambda: log.exists() and "EARLIER []" in log.read_text(), "no start", 60)
        held = jobdir / "pods/again-master-0/empty-dirs"
        assert held.stat().st_mode & 0o777 == 0o700  # the pod's files are no one else's
        out = kctl("chaos", "again", "kill", "master-0", "--local", env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        out = kctl("wait", "again", "--local", "--timeout", "60", env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr + log.read_text()
        assert "EARLIER ['probe-run-0']" in log.read_text()
    finally:
        kctl("delete", "again", "--local", env=env, cwd=tmp_path)
    wait_for(lambda: not (jobdir / "pods/again-master-0").exists(), "the pod stayed", 30)
    home = str(tmp_path / "home")
    assert not [line for line in Path("/proc/self/mounts").read_text().splitlines() if home in line]


def test_nothing_of_a_job_listens_on_the_hosts_loopback(tmp_path: Path) -> None:
    """The rendezvous store listens in the Master's sandbox, not on this machine."""
    env = sandbox_env(tmp_path)
    path = job_file(tmp_path, "quiet", "  command: [sleep, '30']\n  nodes: 2\n")
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = [r["pid"] for r in status_of("quiet", env, tmp_path)["local"]["replicas"]]
            if all(pids):
                break
            time.sleep(0.2)
        time.sleep(3)  # torchrun's agent is up and its store listening
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        assert not re.search(r":23456\b", listening), listening
        shown = kctl("status", "quiet", "--local", env=env, cwd=tmp_path).stdout
        assert "pytorchjob/quiet (local, pod sandboxes)" in shown
        assert re.search(r"master-0 .* 10\.213\.\d+\.2 \(pid \d+\)", shown), shown
    finally:
        kctl("delete", "quiet", "--local", env=env, cwd=tmp_path)


ESCAPING = (
    "  command: [python, -c, 'import subprocess, time; "
    'subprocess.Popen(["sleep", "300"], start_new_session=True); time.sleep(300)\']\n'
)


def pod_pids(jobdir: Path, pod: str) -> set[int]:
    return set(pod_processes.find(pod_processes.marker_of(jobdir, pod), exact=True))


def wait_for(check: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_chaos_kills_every_process_of_a_pod_and_cuts_its_network(tmp_path: Path) -> None:
    env = sandbox_env(tmp_path)
    path = job_file(tmp_path, "esc", ESCAPING)
    assert kctl("apply", str(path), "--local", env=env, cwd=tmp_path).returncode == 0
    jobdir = tmp_path / "home/local/default/esc"
    try:
        # The replica's program, torchrun's worker and the escaped `sleep` in its own session.
        wait_for(lambda: len(pod_pids(jobdir, "esc-master-0")) >= 3, "the pod did not start")
        before = pod_pids(jobdir, "esc-master-0")
        out = kctl("chaos", "esc", "kill", "master-0", "--local", env=env, cwd=tmp_path)
        assert out.returncode == 0 and "esc-master-0: killed" in out.stdout, out.stderr
        wait_for(lambda: not before & pod_pids(jobdir, "esc-master-0"), "a process survived")
        assert "fault injected: killed" in (jobdir / "logs/esc-master-0.log").read_text()

        ns = status_of("esc", env, tmp_path)["local"]["replicas"][0]["netns"]
        out = kctl("chaos", "esc", "partition", "master-0", "--for", "2s", "--local", env=env,
                   cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0 and "cut off the network for 2s" in out.stdout, out.stderr

        def link() -> str:
            return subprocess.run(
                ["ip", "-n", ns, "-o", "link", "show", "eth0"], capture_output=True, text=True
            ).stdout

        assert "NO-CARRIER" in link()
        shown = kctl("status", "esc", "--local", env=env, cwd=tmp_path).stdout
        assert "network fault (kctl-train chaos): cut off the network until" in shown, shown
        wait_for(lambda: "NO-CARRIER" not in link(), "the partition did not heal", 15)
        out = kctl("chaos", "esc", "slow", "master-0", "--for", "2s", "--local", env=env,
                   cwd=tmp_path)  # fmt: skip
        # netem where the kernel has it; otherwise the reason, not a tc error.
        assert "slowed (200 ms latency, 0% loss) for 2s" in out.stdout or (
            out.returncode == 1 and "(sch_netem), which this machine's kernel" in out.stderr
        ), out.stderr
        out = kctl("chaos", "esc", "slow", "worker-3", "--local", env=env, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert "no replica 'worker-3' in esc (replicas: master-0)" in out.stderr
    finally:
        kctl("delete", "esc", "--local", env=env, cwd=tmp_path)


def test_network_faults_need_sandboxes_and_say_so(tmp_path: Path) -> None:
    env = sandbox_env(tmp_path)
    env[support.MODE_ENV] = support.PROCESS
    path = job_file(tmp_path, "plain", "  command: [sleep, '60']\n")
    out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
    assert out.returncode == 0 and "(local, processes: KCTL_TRAIN_LOCAL_PODS=process)" in out.stdout
    try:
        out = kctl("chaos", "plain", "partition", "master-0", "--local", env=env, cwd=tmp_path)
        assert out.returncode == 1 and "partition needs pod sandboxes" in out.stderr
        out = kctl("doctor", str(path), "--local", env=env, cwd=tmp_path)
        assert "replicas: processes" in out.stderr
        env.pop(support.MODE_ENV)
        out = kctl("doctor", str(path), "--local", env=env, cwd=tmp_path)
        assert "replicas: pod sandboxes; each has its own network namespace" in out.stderr
    finally:
        kctl("delete", "plain", "--local", env=env, cwd=tmp_path)


# From inside a pod: each line of docs/LOCAL_PODS.md, "The boundary", as one fact; then
# rank 0 plants what a hostile pod would leave for the host in its own run directory.
BOUNDARY_PROBE = r"""
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def code(call):
    try:
        call()
        return "ok"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
def sys_errno(result):
    return "ok" if result == 0 else errno.errorcode[ctypes.get_errno()]
def read(path):
    try:
        with open(path, "rb") as fh:
            return "empty" if not fh.read() else "READ"
    except OSError as exc:
        return errno.errorcode[exc.errno]
def connect(host, port):
    def go():
        with socket.create_connection((host, port), timeout=2):
            pass
    return code(go)
canaries = json.loads(os.environ["PROBE_CANARIES"])
run = os.environ["PROBE_RUN"]
pid1 = open("/proc/1/environ", "rb").read().split(b"\0")
facts = {
    "canaries": {name: read(path) for name, path in canaries.items()},
    "root": sorted(os.listdir("/")),
    "dev": sorted(os.listdir("/dev")),
    "pid1_env": sorted(e.split(b"=", 1)[0].decode() for e in pid1 if e),
    "keyctl": sys_errno(libc.syscall(250, 0, 0, 0, 0, 0)),
    "unshare": sys_errno(libc.unshare(0x40000000)),
    "mount": sys_errno(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
    "write_usr": code(lambda: open("/usr/kctl-probe", "w")),
    "write_run": code(lambda: open(os.path.join(run, "probe-" + os.environ["RANK"]), "w").close()),
    "host_loopback": connect("127.0.0.1", int(os.environ["PROBE_PORT"])),
    "bridge": connect(os.environ["PROBE_BRIDGE"], int(os.environ["PROBE_PORT"])),
}
if os.environ["RANK"] == "0":
    step = os.path.join(run, "checkpoints", "step-000000000001")
    os.makedirs(step, exist_ok=True)
    os.mkfifo(os.path.join(step, "MANIFEST.json"))
    os.symlink("/etc/passwd", os.path.join(run, "run.json"))
    os.makedirs(os.path.join(run, "attempts"), exist_ok=True)
    with open(os.path.join(run, "attempts", "1.json"), "w") as fh:
        fh.write('{"attempt": 1}\n')
os.write(1, ("FACTS " + json.dumps(facts) + "\n").encode())
os.write(1, b"x" * (1 << 20))  # a line without end, larger than any the host keeps
"""

# Every variable PID 1 of a pod may hold (docs/LOCAL_PODS.md, "The boundary", 5).
POD_ENV = {
    # the manifest's container env and the operator's variables
    "KCTL_TRAIN_SPEC", "KCTL_TRAIN_POD_IP", "HOME", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
    "PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR", "PET_MASTER_PORT",
    "WORLD_SIZE", "RANK", "PET_NODE_RANK", "PET_NNODES", "PET_NPROC_PER_NODE",
    "PROBE_CANARIES", "PROBE_RUN", "PROBE_PORT", "PROBE_BRIDGE",
    # the kubelet's, and what the local backend adds
    "HOSTNAME", "PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    "KCTL_TRAIN_LOCAL_POD", "KCTL_TRAIN_TERMINATION_LOG",
}  # fmt: skip


def test_the_boundary_holds_from_inside_a_pod(tmp_path: Path) -> None:
    import socket
    import uuid

    env = sandbox_env(tmp_path)
    env |= {"CANARY_SECRET": "hunter2", "AWS_SECRET_ACCESS_KEY": "not-for-pods"}
    home = tmp_path / "home"
    root_canary = Path("/root") / f".kctl-canary-{uuid.uuid4().hex[:8]}"
    canaries = {
        "root": str(root_canary),
        "dotenv": str(tmp_path / ".env"),
        "key": str(tmp_path / "conf" / "service-account.json"),
        "other_job_state": str(home / "local" / "default" / "other" / "manifest.json"),
        "other_job_store": str(home / "store" / "default" / "other" / "run.json"),
        "shadow": "/etc/shadow",
    }
    for name, path in canaries.items():
        if name != "shadow":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("secret\n")
            Path(path).chmod(0o644)
    listener = socket.create_server(("127.0.0.1", 0))  # a service of this machine
    # The bridge's .1 address: where this machine would be if the bridge had one.
    bridge = PodNetwork.plan(home / "local" / "default" / "edge", []).subnet[1]
    try:
        job = job_file(
            tmp_path,
            "edge",
            "  command: [python, -c, " + json.dumps(BOUNDARY_PROBE) + "]\n"
            "  nodes: 2\n  processesPerNode: 1\n  fault: {restartPolicy: Never}\n"
            "  env:\n"
            f"    PROBE_CANARIES: {json.dumps(json.dumps(canaries))}\n"
            f"    PROBE_RUN: {home / 'store' / 'default' / 'edge'}\n"
            f"    PROBE_PORT: '{listener.getsockname()[1]}'\n"
            f"    PROBE_BRIDGE: '{bridge}'\n",
        )
        out = kctl("apply", str(job), "--local", "--wait", env=env, cwd=tmp_path)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert "Succeeded: PyTorchJob edge is successfully completed" in out.stderr
    finally:
        listener.close()
        root_canary.unlink(missing_ok=True)
    logs = home / "local/default/edge/logs"
    for pod in ("edge-master-0", "edge-worker-0"):
        facts = facts_of(logs / f"{pod}.log")
        # 1, 2: nothing of this machine but the image stand-in; secrets shown empty
        assert facts["canaries"] == {
            "root": "ENOENT", "dotenv": "empty", "key": "empty", "other_job_state": "ENOENT",
            "other_job_store": "ENOENT", "shadow": "ENOENT",
        }, facts["canaries"]  # fmt: skip
        assert not {"home", "var", "opt", "srv", "mnt", "media"} & set(facts["root"])
        # 3: writes go to the pod's own run directory only
        assert (facts["write_usr"], facts["write_run"]) == ("EROFS", "ok")
        # 4: a /dev of its own
        assert facts["dev"] == ["fd", "full", "null", "random", "shm", "stderr", "stdin",
                                "stdout", "tty", "urandom", "zero"]  # fmt: skip
        # 5: the environment is the manifest's and the documented additions, not the shell's
        assert set(facts["pid1_env"]) <= POD_ENV, set(facts["pid1_env"]) - POD_ENV
        # 6: seccomp RuntimeDefault
        assert (facts["keyctl"], facts["unshare"], facts["mount"]) == ("EPERM",) * 3
        # 7: no service of this machine is reachable
        assert facts["host_loopback"] == "ECONNREFUSED"
        assert facts["bridge"] in ("EHOSTUNREACH", "ENETUNREACH", "timeout")
    # What rank 0 planted is hostile input to every reader on this machine: nothing hangs,
    # nothing ends in a traceback, the plain file is collected and the planted ones are not.
    results = tmp_path / "results" / "edge"
    assert (results / "attempts" / "1.json").read_text() == '{"attempt": 1}\n'
    assert not (results / "run.json").exists() and not (results / "checkpoints").exists()
    for args in (("collect", "edge"), ("status", "edge"), ("logs", "edge")):
        out = kctl(*args, "--local", env=env, cwd=tmp_path, timeout=60)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    # The endless line arrives in pieces of at most 64 KiB, never held whole.
    assert max(len(line) for line in out.stdout.splitlines()) < 65 << 10


# A pod as written (issue 23): env from a Secret and a ConfigMap given as files, hostPath,
# configMap and secret volumes where the container mounts them, and its CPU limit.
POD_AS_WRITTEN = r"""
import json, os, time
def attempt(path):
    try:
        open(path, "w").write("x")
        return "written"
    except OSError as exc:
        return os.strerror(exc.errno)
start, cpu = time.monotonic(), time.process_time()
while time.monotonic() - start < 2.0:
    pass
facts = {
    "cpu_share": (time.process_time() - cpu) / (time.monotonic() - start),
    "env": {k: os.environ.get(k) for k in ("TOKEN", "LEVEL", "CFG_mode", "CFG_level")},
    "root_owner": os.stat("/usr").st_uid,
    "config": sorted(os.listdir("/etc/app")),
    "token_file": open("/secrets/tok").read(),
    "write_config": attempt("/etc/app/new"),
    "write_data": attempt("/data/new"),
    "write_usr": attempt("/usr/kctl-train-canary"),
}
print("FACTS " + json.dumps(facts), flush=True)
"""


def test_a_pod_as_written_gets_its_env_volumes_and_cpu_limit(tmp_path: Path) -> None:
    import yaml

    env = sandbox_env(tmp_path)
    pod = {
        "securityContext": {"runAsUser": 0},  # baseline admits root: it changes no host file
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "config", "configMap": {"name": "app"}},
            {"name": "creds",
             "secret": {"secretName": "creds", "items": [{"key": "token", "path": "tok"}]}},
        ],
        "containers": [{
            "name": "node",
            "image": "x",
            "resources": {"limits": {"cpu": "250m"}},
            "envFrom": [{"configMapRef": {"name": "app"}, "prefix": "CFG_"}],
            "env": [
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                {"name": "LEVEL",
                 "valueFrom": {"configMapKeyRef": {"name": "app", "key": "level"}}},
            ],
            "volumeMounts": [
                {"name": "data", "mountPath": "/data"},
                {"name": "config", "mountPath": "/etc/app"},
                {"name": "creds", "mountPath": "/secrets"},
            ],
        }],
    }  # fmt: skip
    runtime = written.runtime("plain", pod)
    job = written.trainjob("written", "plain", ["python3", "-c", POD_AS_WRITTEN])
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
              "data": {"token": "czNjcjN0"}}  # fmt: skip
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
              "data": {"mode": "fast", "level": "3"}}  # fmt: skip
    for name, body in (("runtime", runtime), ("job", job), ("secret", secret), ("cm", config)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(body))
    out = kctl(
        "apply", "job.yaml", "--local", "--runtime", "runtime.yaml", "--secret", "secret.yaml",
        "--configmap", "cm.yaml", "--wait", "--no-collect", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    facts = facts_of(tmp_path / "home/local/default/written/logs/written-node-0-0.log")
    assert facts["env"] == {"TOKEN": "s3cr3t", "LEVEL": "3", "CFG_mode": "fast", "CFG_level": "3"}
    # Its own user namespace: this machine's root owns /usr, and is nobody (65534) inside.
    assert facts["token_file"] == "s3cr3t" and facts["root_owner"] == 65534
    assert facts["config"] == ["level", "mode"]
    # configMap and secret volumes are read-only, an emptyDir writable; this machine's
    # files are read-only to a pod whatever its uid (here 0).
    assert facts["write_config"] == facts["write_usr"] == "Read-only file system", facts
    assert facts["write_data"] == "written"
    assert facts["cpu_share"] < 0.5, facts  # 250m: a quarter of a CPU, not a whole one
    assert not Path("/usr/kctl-train-canary").exists()


ROOT_PROBE = r"""
import json, os, sys
def attempt(path):
    try:
        with open(path, "a") as fh:
            fh.write("pwned")
        return "written"
    except OSError as exc:
        return os.strerror(exc.errno)
targets = json.loads(os.environ["TARGETS"])
facts = {name: attempt(path) for name, path in targets.items()}
facts["uid"] = os.getuid()
facts["uid_map"] = open("/proc/self/uid_map").read().split()
facts["etc_owner"] = os.stat("/etc/passwd").st_uid
print("FACTS " + json.dumps(facts), flush=True)
"""


def test_a_root_pod_with_a_writable_root_changes_nothing_of_this_machine(tmp_path: Path) -> None:
    """Issue 27's uid-0 case, from a hand-written runtime as baseline admits it: runAsUser 0
    and readOnlyRootFilesystem false. It runs in a user namespace of its own; its writes to
    this machine's files fail; a write to its root lands in its own layer; every canary is
    unchanged afterwards."""
    import hashlib
    import sys
    import uuid

    import yaml

    import operator_client

    env = sandbox_env(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep\n")
    root_canary = Path("/root") / f".kctl-canary-{uuid.uuid4().hex[:8]}"
    root_canary.write_text("canary\n")
    own = f"/kctl-train-layer-{uuid.uuid4().hex[:8]}"
    targets = {
        "passwd": "/etc/passwd",
        "venv_kctl": str(Path(sys.executable).parent / "kctl-train"),
        "package": str(Path(operator_client.__file__)),
        "victim": str(victim / "keep"),
        "root": str(root_canary),
        "own_layer": own,
    }
    watched = [Path(p) for name, p in targets.items() if name != "own_layer"]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in watched if p.exists()}
    container = {"name": "node", "image": "x",
                 "securityContext": {"runAsUser": 0, "readOnlyRootFilesystem": False},
                 "env": [{"name": "TARGETS", "value": json.dumps(targets)}]}  # fmt: skip
    runtime = written.runtime("rooted", {"containers": [container]})
    job = written.trainjob("rooted", "rooted", ["python3", "-c", ROOT_PROBE])
    (tmp_path / "runtime.yaml").write_text(yaml.safe_dump(runtime))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    try:
        out = kctl("apply", "job.yaml", "--local", "--runtime", "runtime.yaml", "--wait",
                   "--no-collect", env=env, cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        facts = facts_of(tmp_path / "home/local/default/rooted/logs/rooted-node-0-0.log")
        assert facts["uid"] == 0
        # Its own user namespace: its 0 is 2147418112 here; this machine's root is nobody.
        assert facts["uid_map"][:3] == ["0", "2147418112", "1"], facts
        assert facts["etc_owner"] == 65534
        for name in ("passwd", "venv_kctl", "package", "victim", "root"):
            # Not its files (its root is no one here), and read-only besides.
            assert facts[name] in ("Permission denied", "Read-only file system"), facts
        assert facts["own_layer"] == "written", facts  # its root: its own layer
        assert not Path(own).exists()
        after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in watched if p.exists()}
        assert after == before
    finally:
        root_canary.unlink()


# A pod that says it waits, asks its store (relayed to its loopback) for an answer once
# the test writes word/probe, and prints it; then exits with the code the test writes
# into word/go.
AWAIT_WORD = """\
import os, socket, sys, time
print('waiting' + ' for the word', flush=True)
probed = False
while not os.path.exists('word/go'):
    if not probed and os.path.exists('word/probe'):
        probed = True
        try:
            with socket.create_connection(('127.0.0.1', PORT), timeout=5) as store:
                store.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')
                answer = store.recv(5).decode() or 'cut'
        except OSError as exc:
            answer = repr(exc)
        print('store:', answer, flush=True)
    time.sleep(0.1)
sys.exit(int(open('word/go').read()))
"""


@pytest.mark.parametrize(("code", "outcome"), [(0, "Succeeded"), (3, "Failed")])
def test_a_new_supervisor_takes_over_the_pods_a_killed_one_left(
    tmp_path: Path, code: int, outcome: str, moto_endpoint: str, bucket: str
) -> None:
    """As a restarted operator finds its job's pods running: re-applying after the
    supervisor was killed starts no pod again, and the pods' exits (read from their
    shims' records, not as their parent) decide the job as before. While no supervisor
    runs, the pods reach their store on this machine's loopback (their shims relay it)
    but for one cut off by a partition; the new supervisor heals that on time."""
    env = sandbox_env(tmp_path)
    word = tmp_path / "word"
    word.mkdir(mode=0o755)
    program = AWAIT_WORD.replace("PORT", str(urlsplit(moto_endpoint).port))
    path = job_file(
        tmp_path,
        "adopt",
        f"  command: [python, -c, {json.dumps(program)}]\n"
        "  nodes: 2\n  fault: {backoffLimit: 0}\n"
        f"  storage: {{uri: 's3://{bucket}/runs', endpoint: '{moto_endpoint}'}}\n",
    )
    assert kctl("apply", str(path), "--local", env=env, cwd=tmp_path).returncode == 0
    logs = tmp_path / "home/local/default/adopt/logs"
    try:
        # Past the runtime's own store calls before it runs the command: the pods wait.
        def waiting() -> bool:
            names = ("adopt-master-0", "adopt-worker-0")
            return all("waiting for the word" in (logs / f"{n}.log").read_text() for n in names)

        wait_for(waiting, "the pods did not start", 60)
        out = kctl("chaos", "adopt", "partition", "worker-0", "--for", "8s", "--local",
                   env=env, cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0, out.stderr
        local = status_of("adopt", env, tmp_path)["local"]
        pods = {r["name"]: r["pid"] for r in local["replicas"]}
        assert all(pods.values()), local
        cut = local["replicas"][1]
        assert cut["fault"]["action"] == "partition" and cut["fault"]["healAt"], cut
        os.kill(local["supervisorPid"], signal.SIGKILL)
        wait_for(lambda: not running(local["supervisorPid"]), "the supervisor lives on")
        assert all(running(pid) for pid in pods.values()), "a pod ended with its supervisor"
        (word / "probe").write_text("")
        (word / "probe").chmod(0o644)

        def answers() -> list[str]:
            return [
                line for name in pods for line in (logs / f"{name}.log").read_text().splitlines()
                if line.startswith("store:")
            ]  # fmt: skip

        wait_for(lambda: len(answers()) == 2, "the pods did not ask their store", 15)
        master, worker = (
            (logs / f"{name}.log").read_text() for name in ("adopt-master-0", "adopt-worker-0")
        )
        assert "store: HTTP/" in master, answers()  # relayed with no supervisor
        assert "store: HTTP/" not in worker, answers()  # cut off

        out = kctl("apply", str(path), "--local", "--dry-run=server", env=env, cwd=tmp_path)
        assert "lost its supervisor: apply takes over adopt-master-0, adopt-worker-0" in (
            out.stdout + out.stderr
        )
        out = kctl("apply", str(path), "--local", env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "pytorchjob.kubeflow.org/adopt unchanged" in out.stdout
        assert "a new one took over adopt-master-0, adopt-worker-0" in out.stdout + out.stderr
        again = status_of("adopt", env, tmp_path)["local"]
        assert again["supervisorPid"] != local["supervisorPid"]
        assert {r["name"]: r["pid"] for r in again["replicas"]} == pods  # none restarted
        worker_log = logs / "adopt-worker-0.log"
        wait_for(lambda: "fault over: network restored" in worker_log.read_text(),
                 "the new supervisor did not heal the partition", 20)  # fmt: skip
        link = ["ip", "-n", cut["netns"], "-o", "link", "show", "eth0"]
        assert "NO-CARRIER" not in subprocess.run(link, capture_output=True, text=True).stdout
        healed = status_of("adopt", env, tmp_path)["local"]["replicas"][1]
        assert "fault" not in healed, healed

        (word / "go").write_text(str(code))
        (word / "go").chmod(0o644)
        kctl("wait", "adopt", "--local", env=env, cwd=tmp_path)
        body = status_of("adopt", env, tmp_path)
        assert body["local"]["state"] == outcome, body
        replicas = body["local"]["replicas"]
        codes = [r["exitCode"] for r in replicas]
        # torchrun's agent (the pod's PID 1) exits 1 for a failed worker; a pod whose exit
        # was not read from its record would show the kill's 137.
        assert codes == [0, 0] if code == 0 else 1 in codes and 137 not in codes, replicas
        assert all(r["restarts"] == 0 for r in replicas), replicas
        conditions = [c["type"] for c in body["status"]["conditions"]]
        assert conditions[:2] == ["Created", "Running"] and conditions[-1] == outcome
        log = (logs / "adopt-master-0.log").read_text()
        assert f"a new local supervisor took over this pod (pid {pods['adopt-master-0']})" in log
    finally:
        kctl("delete", "adopt", "--local", env=env, cwd=tmp_path)
