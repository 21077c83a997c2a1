"""Records the corpus's goldens from the real cluster of `make cluster`: each input applied
(as its admin, into kctl-fidelity, which enforces the baseline Pod Security level as a local
run does by default) through the real webhooks and controllers; then the pods they made, as
project.py keeps them, or the refusal, and the controllers' creation failures (their Warning
events). No kubelet is needed: the pods are read from the API server once their number has
settled; where the input's runtime starts Jobs after others (dependsOn), each wave's pods
are then marked Succeeded, as a kubelet would report them, so that the next wave is made
and recorded too. Then the job is deleted.

    python -m tests.fidelity.record [NAME...]     # all inputs without names
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from ..e2e.cluster import JOB_LABEL, STATE, node_to_oneself
from .corpus import GOLDEN, NAMESPACE, documents, names
from .project import project, refusal

KUBECTL = [str(STATE / "bin/kubectl"), "--kubeconfig", str(STATE / "kubeconfig")]
SETTLE_S = 3.0  # the pod count unchanged this long: the controllers are done
LIMIT_S = 30.0
FAILED_SETTLE_S = 10.0
# After a wave is marked Succeeded: its Jobs complete, then JobSet makes the next (slow on
# a busy machine; only an input whose next wave never comes waits it out).
WAVE_LIMIT_S = 90.0
REAL_NODE = "kctl-node"  # cluster/node.sh
AT_ONCE = 4  # inputs recorded at once (the controllers' clients are rate-limited)


def _kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KUBECTL, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


def _pods(kind: str, name: str) -> list[dict[str, Any]]:
    done = _kubectl("get", "pods", "-n", NAMESPACE, "-l", f"{JOB_LABEL[kind]}={name}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(done.stdout)["items"] if done.returncode == 0 else []
    return items


# The Warning events by which a controller reports an object it could not create: the
# training-operator's pods, the Job controller's, JobSet's Jobs, Trainer's JobSet.
CREATION_FAILED = ("FailedCreatePod", "FailedCreate", "JobCreationFailed",
                   "TrainJobResourcesCreationFailed")  # fmt: skip


# Warnings that are retries, not failures: the operator's cache lags behind a pod it made
# (it tries again and is told the pod exists); Trainer re-applies a JobSet it made with a
# field JobSet makes immutable (rt-torchtune's volumeClaimPolicies, now and then: the JobSet
# and its pods are there).
RETRIES = ("already exists", "Value is immutable")


def _objects(name: str, runtimes: list[dict[str, Any]]) -> set[str]:
    """The names of the objects the controllers report an input's failures on: the job (a
    PyTorchJob, or a TrainJob and its JobSet) and its Jobs (Kubeflow's installed
    torch-distributed has one, `node`)."""
    jobs = {"node"} | {
        str(job.get("name"))
        for runtime in runtimes
        for job in ((runtime.get("spec") or {}).get("template") or {})
        .get("spec", {})
        .get("replicatedJobs")
        or []
    }
    return {name} | {f"{name}-{job}-{i}" for job in jobs for i in range(4)}


def _events(objects: set[str]) -> list[str]:
    """The controllers' creation failures reported on these objects."""
    done = _kubectl("get", "events", "-n", NAMESPACE, "-o", "json")
    if done.returncode != 0:
        return []
    return sorted(
        {
            refusal(f"{e['reason']}: {e['message']}")
            for e in json.loads(done.stdout)["items"]
            if e.get("type") == "Warning"
            and e.get("reason") in CREATION_FAILED
            and e["involvedObject"]["name"] in objects
            and not any(word in e["message"] for word in RETRIES)
        }
    )


def record(name: str) -> dict[str, Any]:
    """The golden of one input: its pods, or why there are none."""
    job, *runtimes = documents(name)
    kind = job["kind"].lower()
    for runtime in runtimes:
        done = _kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump(runtime)
        )
        if done.returncode != 0:  # Trainer's runtime webhook refused it
            return {"refused": done.stderr.strip()}
    # What an earlier recording left (its JobSet, Jobs, pods) would meet this one's.
    _kubectl(
        "delete", kind, name, "-n", NAMESPACE, "--cascade=foreground", "--wait=true",
        "--ignore-not-found",
    )  # fmt: skip
    objects = _objects(name, runtimes)
    for obj in objects:  # an earlier recording's events would read as this one's
        _kubectl("delete", "events", "-n", NAMESPACE, f"--field-selector=involvedObject.name={obj}")
    done = _kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(job))
    if done.returncode != 0:
        return {"refused": done.stderr.strip()}
    try:
        pods = _settle(kind, name, objects, [])
        for _ in range(_later_waves(runtimes)):
            # What a kubelet would report once the pods ran: then the Job controller
            # completes the Jobs, and JobSet starts the Jobs that depend on them.
            for pod in pods:
                if pod.get("status", {}).get("phase") != "Succeeded":
                    _succeed(pod["metadata"]["name"])
            more = _settle(kind, name, objects, pods, WAVE_LIMIT_S)
            if len(more) == len(pods):
                break
            pods = more
        events = _events(objects)
        recorded = {"pods": sorted((project(p) for p in pods), key=lambda p: p["name"])}
        return recorded | ({"events": events} if events else {})
    finally:
        _kubectl("delete", kind, name, "-n", NAMESPACE, "--wait=false")


def _settle(
    kind: str, name: str, objects: set[str], known: list[dict[str, Any]], limit: float = LIMIT_S
) -> list[dict[str, Any]]:
    """The job's pods once the controllers are done beyond `known`: their number has not
    changed for SETTLE_S and each Job has its pods (a busy operator or Job controller may
    take longer than that between two pods), or, once a controller has reported a creation
    failure, neither pods nor failures changed for FAILED_SETTLE_S; else whatever there is
    after `limit` (a job that makes no pods at all)."""
    pods, before = known, _events(objects)
    seen, settled, deadline = before, time.monotonic(), time.monotonic() + limit
    while time.monotonic() < deadline:
        now, failures = _pods(kind, name), _events(objects)
        if len(now) != len(pods) or failures != seen:
            pods, seen, settled = now, failures, time.monotonic()
        elif failures != before:
            # A controller failed to create something and retries with backoff (the
            # training-operator each time in Go's random order of replica types, stopping
            # at the first refusal): what it made and reported is settled once nothing
            # changed for FAILED_SETTLE_S and, for a PyTorchJob, each of its pods was made
            # or refused (else until `limit`: a retry that starts with the other type).
            if time.monotonic() - settled >= FAILED_SETTLE_S and _every_pod_tried(
                kind, name, pods, failures
            ):
                break
        elif (
            time.monotonic() - settled >= SETTLE_S
            and len(pods) > len(known)
            and _jobs_have_their_pods(kind, name, pods)
        ):
            break
        time.sleep(0.5)
    return pods


def _every_pod_tried(kind: str, name: str, pods: list[dict[str, Any]], failures: list[str]) -> bool:
    """Whether each pod a PyTorchJob asks for exists or was refused by name (the
    training-operator names a pod it could not create: `Pod "<job>-worker-0" is
    invalid`); for a TrainJob, whose Jobs the Job controller fills, always."""
    if kind != "pytorchjob":
        return True
    done = _kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json")
    if done.returncode != 0:
        return True
    specs = json.loads(done.stdout)["spec"]["pytorchReplicaSpecs"]
    made = {p["metadata"]["name"] for p in pods}
    wanted = {
        f"{name}-{rtype.lower()}-{i}"
        for rtype, spec in specs.items()
        for i in range(int((spec or {}).get("replicas", 1)))
    }
    return all(pod in made or any(f'"{pod}"' in f for f in failures) for pod in wanted)


def _jobs_have_their_pods(kind: str, name: str, pods: list[dict[str, Any]]) -> bool:
    """Whether the controllers made every pod they have decided on so far: each Job of a
    TrainJob's JobSet its parallelism, a PyTorchJob each replica its own."""
    if kind == "pytorchjob":
        done = _kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json")
        specs = (
            json.loads(done.stdout)["spec"]["pytorchReplicaSpecs"] if done.returncode == 0 else {}
        )
        wanted = sum(int((r or {}).get("replicas", 1)) for r in specs.values())
        return len(pods) >= wanted
    done = _kubectl("get", "jobs", "-n", NAMESPACE, "-l", f"{JOB_LABEL[kind]}={name}", "-o", "json")
    if done.returncode != 0:
        return False
    made: dict[str, int] = {}
    for pod in pods:
        job = pod["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name", "")
        made[job] = made.get(job, 0) + 1
    return all(
        made.get(job["metadata"]["name"], 0) >= int(job["spec"].get("parallelism") or 0)
        for job in json.loads(done.stdout)["items"]
    )


def _later_waves(runtimes: list[dict[str, Any]]) -> int:
    """How many waves of Jobs the input's own runtime starts after its first (the longest
    dependsOn chain)."""
    depth = 0
    for runtime in runtimes:
        template = (runtime.get("spec") or {}).get("template") or {}
        level: dict[str, int] = {}
        for job in (template.get("spec") or {}).get("replicatedJobs") or []:
            deps = [level.get(d.get("name"), 0) for d in job.get("dependsOn") or []]
            level[job.get("name")] = 1 + max(deps) if deps else 0
        depth = max([depth, *level.values()])
    return depth


def _succeed(pod: str) -> None:
    """Mark a pod Succeeded, as its kubelet would once its containers exited 0."""
    status = {"status": {"phase": "Succeeded"}}
    done = _kubectl(
        "patch", "pod", pod, "-n", NAMESPACE, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{pod}: could not mark it Succeeded: {done.stderr}")


def main(argv: list[str], into: Path = GOLDEN) -> None:
    """Record the named inputs (all without names) into `into`, several at once: each
    mostly waits for the controllers, and their objects have names of their own."""
    into.mkdir(exist_ok=True)

    def one(name: str) -> None:
        started = time.monotonic()
        golden = record(name)
        (into / f"{name}.yaml").write_text(yaml.safe_dump(golden, sort_keys=True, width=100))
        what = f"{len(golden['pods'])} pods" if "pods" in golden else "refused"
        print(f"{name}: {what} ({time.monotonic() - started:.1f} s)", flush=True)

    # No pod runs: the real node is cordoned (no kubelet then reports on what the recorder
    # marks Succeeded), and other tests that use it wait (node_to_oneself).
    with node_to_oneself():
        _kubectl("cordon", REAL_NODE)
        try:
            with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
                list(pool.map(one, argv or names()))
        finally:
            _kubectl("uncordon", REAL_NODE)


if __name__ == "__main__":
    main(sys.argv[1:])
