"""The real cluster of `make cluster` beside the local backend, measured in one run:

- `make cluster` when it already runs (it only checks), and a warm start: `make
  cluster-down` then `make cluster` with every binary built (the trainer image is imported
  again, as after any cluster-down); cluster/up.sh itself, without make's prerequisites
  (which rebuild the trainer image when the package changed). A cold start (nothing in the
  Go caches) is measured by CI's first run, not here: it would empty this machine's caches.
- apply → first training step: the same two-node CPU job (examples/kind-cpu.yaml's model),
  on the cluster (real kubelet, containerd, the trainer image, S3 on moto) and with --local.
- replica killed → training again: the master pod deleted (cluster: as `kubectl delete pod`;
  local: `kctl-train chaos kill`), until the first progress line after training paused.

Needs a running `make cluster` (root). Prints seconds and the cluster/local ratios; asserts
nothing.  Usage: python bench/cluster.py [--no-restart]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".cluster"
KCTL = str(Path(sys.executable).parent / "kctl-train")
KUBECTL = str(STATE / "bin" / "kubectl")
NAMESPACE = "kctl-e2e"
PROGRESS = "kctl-train.progress"
# moto's credentials (any are accepted), for the pods' store and this script's boto3
os.environ.update(
    {"AWS_ACCESS_KEY_ID": "moto", "AWS_SECRET_ACCESS_KEY": "moto-e2e", "AWS_REGION": "us-east-1"}
)
ENV = {**os.environ, "NO_COLOR": "1"}


def timed(*command: str) -> float:
    started = time.monotonic()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def job_file(folder: Path, name: str, local: bool) -> Path:
    doc = yaml.safe_load((ROOT / "examples/kind-cpu.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["train"]["trainer"] = {"max_steps": 100000, "log_every_n_steps": 5}
    doc["spec"]["checkpoint"]["every"] = "10000 steps"
    if local:
        doc["spec"].pop("storage")  # the local store
        doc["spec"]["resources"] = {"cpu": "1", "memory": "2Gi"}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def fresh_store(name: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:9000", region_name="us-east-1")
    if "kctl-train" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="kctl-train")
    listed = s3.list_objects_v2(Bucket="kctl-train", Prefix=f"runs/{NAMESPACE}/{name}/")
    for item in listed.get("Contents", []):
        s3.delete_object(Bucket="kctl-train", Key=item["Key"])


def kctl(local: bool, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--local"] if local else ["-n", NAMESPACE]
    env = {**ENV, "KUBECONFIG": str(STATE / "user.kubeconfig")}
    return subprocess.run([KCTL, *args, *where], capture_output=True, text=True, env=env, cwd=ROOT)


def progress(local: bool, name: str) -> list[tuple[dt.datetime, int]]:
    """The job's progress lines: (time stamped, step), every replica's log."""
    found = []
    for line in kctl(local, "logs", name).stdout.splitlines():
        text = line.split("] ", 1)[-1]
        if PROGRESS in text:
            stamp = dt.datetime.combine(dt.date.today(), dt.time.fromisoformat(text[:8]))
            found.append((stamp, int(json.loads(text.split(PROGRESS, 1)[1])["step"])))
    return found


def seconds_until(local: bool, name: str, since: dt.datetime, *, after_gap: bool = False) -> float:
    """Seconds from `since` until a progress line stamped after it is in the job's logs;
    with `after_gap`, the first one after a pause of 2 s or more (training stopped by the
    kill, then again: the killed process logs on until its emergency checkpoint, and the
    new one resumes from that step, so neither stamps nor steps alone tell them apart)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        lines = sorted(progress(local, name))
        for (before, _), (stamp, _) in zip([(since, 0), *lines], lines, strict=False):
            # Stamps are whole seconds: only a later second is surely after `since`.
            if stamp > since and (not after_gap or (stamp - before).total_seconds() >= 2):
                return (dt.datetime.now() - since).total_seconds()
        time.sleep(0.5)
    raise TimeoutError(f"no progress of {name}")


def run(local: bool, folder: Path) -> tuple[float, float]:
    name = f"bench-{'local' if local else 'cluster'}"
    kctl(local, "delete", name, "--wait")
    if not local:
        fresh_store(name)
    start = dt.datetime.now()
    applied = kctl(
        local,
        "apply",
        str(job_file(folder, name, local)),
        *([] if local else ["--force-namespace"]),
    )
    if applied.returncode:
        raise RuntimeError(applied.stderr)
    first = seconds_until(local, name, start)
    killed = dt.datetime.now()
    if local:
        kctl(local, "chaos", name, "kill", "master-0")
    else:
        subprocess.run(
            [KUBECTL, "--kubeconfig", str(STATE / "kubeconfig"), "delete", "pod", "-n",
             NAMESPACE, f"{name}-master-0", "--wait=false"],
            check=True, capture_output=True,
        )  # fmt: skip
    again = seconds_until(local, name, killed, after_gap=True)
    kctl(local, "delete", name, "--wait")
    return first, again


def main() -> None:
    if not (STATE / "user.kubeconfig").is_file():
        sys.exit("no cluster: run `make cluster` first")
    # cluster/up.sh is make cluster after its prerequisites (venv, packages, `make image`).
    print(f"make cluster, already running:   {timed('cluster/up.sh'):6.1f} s")
    if "--no-restart" not in sys.argv:
        down = timed("cluster/down.sh")
        up = timed("cluster/up.sh")
        print(f"make cluster, warm start:        {up:6.1f} s  (cluster-down took {down:.1f} s)")
    with tempfile.TemporaryDirectory() as folder:
        cluster = run(False, Path(folder))
        local = run(True, Path(folder))
    for what, c, lo in (("apply -> first step", cluster[0], local[0]),
                        ("kill -> training again", cluster[1], local[1])):  # fmt: skip
        print(f"{what:<24} cluster {c:6.1f} s   local {lo:6.1f} s   ratio {c / lo:5.2f}x")


if __name__ == "__main__":
    main()
