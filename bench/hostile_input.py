"""Hostile input, each case refused cleanly: `kctl-train validate` on job files of up to
1 MiB (exit 2, a message, no traceback, in under a second), then what an attacker would
hand the other commands (issue 20): a FIFO or /dev/zero as the job file, credentials in
an endpoint, a fork bomb for a local run, a system directory as a local store, stores
holding a FIFO, a link, a 1,000-character key or manifests of the wrong shape for
`collect`, a 100,000-character `--repo`, a key pasted into a workspace for `build`; and
(issue 27) hand-written TrainJobs and runtimes: hostPath `/`, privileged, uid 0 with
runAsNonRoot, a volume or job name that climbs out of its directory, a run root aliasing
another job's, a Secret nobody gave, a kubeconfig and a gzip of keys in a build, and
`collect` (with its report) of documents and CSVs of the wrong shape or size.
Prints each case's exit code, wall time and the first line of the message, with
`python3 -c pass` measured in the same run for scale. Asserts nothing about time; exits
1 if any case was not refused cleanly (or blocked: a 60 s limit).
Usage: python bench/hostile_input.py
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from operator_client.runstore import checkpoints
from operator_client.storage import ObjectStore, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ beside bench/
from tests.moto_process import moto_bucket

KCTL = str(Path(sys.executable).parent / "kctl-train")
HEAD = "apiVersion: kctl-train/v1alpha1\nkind: TrainingJob\nmetadata: {name: h}\nspec:\n"
HEAD += "  image: local\n  command: [python, train.py]\n"
MIB = 1 << 20


def files() -> dict[str, str]:
    """1 MiB of each kind, and the same just under the 256 KiB file limit (where parsing
    and validation really run)."""
    out: dict[str, str] = {"1 MiB comment": HEAD + "# " + "x" * MIB + "\n"}
    for label, size in (("1 MiB", MIB), ("250 KB", 250_000)):
        env_count = size // 34
        many_env = "".join(f"    V{i}: '{'x' * 20}'\n" for i in range(env_count))
        numbers = ", ".join(str(i) for i in range(size // 7))
        digits = size // 2 - 100
        out |= {
            f"{label}: {env_count} env vars": HEAD + "  env:\n" + many_env,
            f"{label}: numbers in modelArgs": HEAD.replace("  command: [python, train.py]\n", "")
            + f"  train: {{model: 'a.b:C', modelArgs: {{xs: [{numbers}, .nan]}}}}\n",
            f"{label}: label value": HEAD.replace(
                "{name: h}", "{name: h, labels: {a: " + "x" * (size - 200) + "}}"
            ),
            f"{label}: huge numbers": HEAD
            + f"  nodes: 1{'9' * digits}\n  fault: {{activeDeadline: {'9' * digits}d}}\n",
            f"{label}: NUL bytes": HEAD + '  env: {A: "' + "\\0" * (size // 2 - 100) + '"}\n',
        }
    nested = "  env: &a {A: x}\n" + "".join(
        f"  e{i}: &a{i} [{', '.join(['*a' if i == 0 else f'*a{i - 1}'] * 9)}]\n" for i in range(7)
    )
    wide = ", ".join(["*s"] * 70)
    return out | {
        "alias bomb (9^7 nodes)": HEAD + nested,
        "alias expansion (4.2 MB of text)": HEAD.replace("  command: [python, train.py]\n", "")
        + f"  command: [&s '{'x' * 60_000}', {wide}]\n",
    }


def timed(
    argv: list[str], cwd: Path | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)
    except subprocess.TimeoutExpired:
        out = subprocess.CompletedProcess(argv, -1, "", "BLOCKED: no answer within 60 s")
    return time.perf_counter() - start, out


JOB = HEAD.replace("metadata: {name: h}", "metadata: {name: hostile}")


def _checkpointed(store: ObjectStore, scratch: Path) -> None:
    """A run with one committed checkpoint and the plain files collect takes."""
    model = scratch / "model.ckpt"
    model.write_bytes(os.urandom(4096))
    checkpoints.publish(
        store, {checkpoints.MODEL_FILE: model}, step=10, epoch=0, attempt=1, world_size=1, keep=2
    )
    store.put_bytes("attempts/1.json", b'{"attempt": 1}')


def _manifest(store: ObjectStore, change: dict[str, object]) -> None:
    key = "checkpoints/step-000000000010/MANIFEST.json"
    store.put_bytes(key, json.dumps({**json.loads(store.get_bytes(key)), **change}).encode())


def _put(key: str, data: bytes) -> Callable[[Path, ObjectStore], None]:
    """A plant that writes `data` at `key` of the run, as a pod could."""

    def plant(run: Path, store: ObjectStore) -> None:
        store.put_bytes(key, data)

    return plant


def _collect(tmp: Path, plant: Callable[[Path, ObjectStore], None], *flags: str) -> list[str]:
    run = tmp / "store" / "default" / "hostile"
    store = open_store(run.as_uri() + "/")
    scratch = tmp / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    _checkpointed(store, scratch)
    plant(run, store)
    return [KCTL, "collect", "hostile", "--from", (tmp / "store").as_uri(), "--to",
            str(tmp / "out"), *flags]  # fmt: skip


def cases(tmp: Path, endpoint: str) -> dict[str, tuple[list[str], tuple[int, ...]]]:
    """name -> (command, the exit codes of a clean refusal). Each builds its own input."""
    job = tmp / "job.yaml"
    job.write_text(JOB)
    fifo = tmp / "fifo.yaml"
    os.mkfifo(fifo)
    creds = tmp / "creds.yaml"
    creds.write_text(
        JOB + "  storage: {uri: 's3://bucket/r', endpoint: 'http://AKIA:SECRET@h:9000'}\n"
    )
    bomb = tmp / "bomb.yaml"
    bomb.write_text(JOB + "  processesPerNode: 1000000\n")
    etc = tmp / "etc.yaml"
    etc.write_text(JOB + "  storage: {uri: 'file:///etc'}\n")
    climb = tmp / "climb.yaml"
    climb.write_text(JOB + "  storage: {uri: 'file:///tmp/../../etc/../root'}\n")
    clean, work = tmp / "clean", tmp / "workspace"
    for directory in (clean, work):
        directory.mkdir()
        (directory / "train.py").write_text("import torch\n")
    (work / "config.py").write_text("KEY = 'AKIAIOSFODNN7EXAMPLE'\n")
    (work / "service-account.json").write_text("{}")
    s3 = open_store("s3://hostile/runs/default/hostile/", endpoint=endpoint)
    _checkpointed(s3, tmp)
    s3.put_bytes("monitor/" + "x" * 1000 + ".csv", b"1")

    trainjob_cases = _trainjob_cases(tmp)
    (work27 := tmp / "workspace27").mkdir()
    (work27 / "train.py").write_text("print(1)\n")
    (work27 / "admin.conf").write_text("users:\n- user:\n    client-key-data: " + "QUJD" * 8 + "\n")
    with gzip.open(work27 / "keys.gz", "wt") as fh:
        fh.write("aws_access_key_id=AKIAIOSFODNN7EXAMPLE\n")

    def fifo_manifest(run: Path, store: ObjectStore) -> None:
        (run / "checkpoints" / "step-000000000020").mkdir(parents=True)
        os.mkfifo(run / "checkpoints" / "step-000000000020" / "MANIFEST.json")

    def linked_run_json(run: Path, store: ObjectStore) -> None:
        (run / "run.json").symlink_to("/etc/passwd")

    return {
        "job file is a FIFO": ([KCTL, "validate", str(fifo)], (2,)),
        "job file is /dev/zero": ([KCTL, "validate", "/dev/zero"], (2,)),
        "credentials in storage.endpoint": ([KCTL, "validate", str(creds)], (2,)),
        "credentials in --endpoint": (
            [KCTL, "collect", "x", "--from", "s3://b/r", "--endpoint", "http://K:S@h:9"],
            (2,),
        ),
        "processesPerNode: 1000000 (local)": (
            [KCTL, "apply", str(bomb), "--local", "--dry-run=server"],
            (2,),
        ),
        "store file:///etc (local)": ([KCTL, "apply", str(etc), "--local"], (2,)),
        "store file:///tmp/../../etc/../root": ([KCTL, "validate", str(climb)], (2,)),
        "collect: FIFO at a MANIFEST": (_collect(tmp / "c1", fifo_manifest), (0,)),
        "collect: link at run.json": (_collect(tmp / "c2", linked_run_json), (0,)),
        "collect: 1,000-character key (S3)": (
            [
                KCTL,
                "collect",
                "hostile",
                "--from",
                "s3://hostile/runs",
                "--endpoint",
                endpoint,
                "--to",
                str(tmp / "out-s3"),
            ],
            (1,),
        ),
        "collect: step as a string": (
            _collect(tmp / "c3", lambda r, s: _manifest(s, {"step": "10"})),
            (1,),
        ),
        "collect: member name a list": (
            _collect(tmp / "c4", lambda r, s: _manifest(s, {"members": [{"name": ["m"]}]})),
            (1,),
        ),
        "collect --all: fractional step": (
            _collect(tmp / "c5", lambda r, s: _manifest(s, {"step": 10.5}), "--all-checkpoints"),
            (1,),
        ),
        "build --repo of 100,000 characters": (
            [KCTL, "build", str(clean), "--base", "t:1", "--repo", "r/" + "a" * 100_000],
            (2,),
        ),
        "build: a key pasted into config.py": ([KCTL, "build", str(work), "--base", "t:1"], (2,)),
        "build: admin.conf and a gzip of keys": (
            [KCTL, "build", str(work27), "--base", "t:1"],
            (2,),
        ),
        "collect: _SUCCESS = [1]": (_collect(tmp / "c6", _put("_SUCCESS", b"[1]")), (1,)),
        "collect: attempts/0.json = [1,2]": (
            _collect(tmp / "c7", _put("attempts/0.json", b"[1,2]")),
            (0,),
        ),
        "collect: a 200 KB CSV field": (
            _collect(tmp / "c8", _put("metrics/metrics.csv", b"step,l\n1," + b"9" * 200_000)),
            (0,),
        ),
        "collect: 64 MiB monitor CSV, no newline": (
            _collect(tmp / "c9", _put("monitor/node-0.csv", b"x" * (64 << 20))),
            (0,),
        ),
        "delete ../../../victim --local": ([KCTL, "delete", "../../../victim", "--local"], (2,)),
        "chaos a 5,000-character name": (
            [KCTL, "chaos", "x" * 5000, "kill", "master-0", "--local"],
            (2,),
        ),
        **trainjob_cases,
    }


RUNTIME_NAME = "hostile"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def _trainjob_cases(tmp: Path) -> dict[str, tuple[list[str], tuple[int, ...]]]:
    """A runtime and a TrainJob written by hand, each patched one hostile way."""
    out: dict[str, tuple[list[str], tuple[int, ...]]] = {}
    variants: dict[str, tuple[dict[str, object], dict[str, object], dict[str, str]]] = {
        "runtime: hostPath / (baseline)": (
            {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
            {"volumeMounts": [{"name": "host", "mountPath": "/host"}]},
            {},
        ),
        "runtime: privileged": ({}, {"securityContext": {"privileged": True}}, {}),
        "runtime: runAsNonRoot with uid 0": (
            {},
            {"securityContext": {"runAsUser": 0, "runAsNonRoot": True}},
            {},
        ),
        "runtime: volume ../../../victim": (
            {"volumes": [{"name": "../../../victim", "emptyDir": {}}]},
            {"volumeMounts": [{"name": "../../../victim", "mountPath": "/v"}]},
            {},
        ),
        "runtime: a Secret nobody gave": (
            {},
            {
                "env": [
                    {
                        "name": "HOME_KEY",
                        "valueFrom": {"secretKeyRef": {"name": "s", "key": "HOME"}},
                    }
                ]
            },
            {},
        ),
        "trainjob: run-root of another job": (
            {},
            {},
            {"kctl-train.io/run-root": (tmp / "store" / "default" / "victim").as_uri() + "/"},
        ),
    }
    for index, (name, (pod, container, notes)) in enumerate(variants.items()):
        node_pod = {"containers": [{"name": "node", "image": "x", **container}], **pod}
        runtime = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": RUNTIME_NAME},
            "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {ANCESTOR: "trainer"}},
                    "spec": {"template": {"spec": node_pod}},
                },
            }]}}},
        }  # fmt: skip
        job = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": f"hostile-{index}", "annotations": notes},
            "spec": {"runtimeRef": {"name": RUNTIME_NAME}, "trainer": {"command": ["true"]}},
        }
        runtime_file, job_file = tmp / f"runtime-{index}.json", tmp / f"tj-{index}.json"
        runtime_file.write_text(json.dumps(runtime))
        job_file.write_text(json.dumps(job))
        argv = [KCTL, "apply", str(job_file), "--local", "--runtime", str(runtime_file)]
        out[name] = (argv, (2,))
    return out


def main() -> int:
    baseline, _ = timed([sys.executable, "-c", "pass"])
    print(f"python3 -c pass: {baseline:.3f}s")
    print(f"{'file':36} {'bytes':>9} {'exit':>4} {'seconds':>7}  message")
    bad = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files().items():
            path = Path(tmp) / "job.yaml"
            path.write_text(text)
            seconds, out = timed([KCTL, "validate", str(path)])
            first = (out.stderr.strip().splitlines() or [""])[0]
            first = first.replace(str(path), "job.yaml")[:90]
            clean = out.returncode == 2 and "Traceback" not in out.stderr
            bad += not clean
            total += 1
            print(f"{name:36} {len(text.encode()):>9} {out.returncode:>4} {seconds:>7.3f}  {first}")
    print(f"\n{'case':36} {'exit':>4} {'seconds':>7}  message (or the problem collect reports)")
    with tempfile.TemporaryDirectory() as tmp, moto_bucket("hostile") as endpoint:
        os.environ["KCTL_TRAIN_HOME"] = str(Path(tmp) / "home")
        for name, (argv, codes) in cases(Path(tmp), endpoint).items():
            seconds, out = timed(argv, cwd=Path(tmp))
            text = out.stderr.replace(tmp, "…")
            lines = [ln for ln in text.splitlines() if "error" in ln or "ignoring" in ln]
            first = (lines or text.strip().splitlines() or [""])[0].strip()[:110]
            clean = out.returncode in codes and "Traceback" not in out.stderr
            bad += not clean
            total += 1
            print(f"{name:36} {out.returncode:>4} {seconds:>7.3f}  {first}")
    print(f"\n{total - bad} held, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
