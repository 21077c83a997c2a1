"""A crash fuzz of the checkpoint save path (issue 31), shared by bench/checkpoint_fuzz.py
(200 trials and more) and tests/test_checkpoint_fuzz.py (a seeded 20).

A step-stamped model (tests/stamp.py, FuzzModel: after step N every weight and a tensor
of the optimizer's state hold N) trains on 2 nodes of one rank each and saves every
SAVE_EVERY steps into a file:// store (DCP writes in place there, so every stage of a save
shows in the store). Its replicas run as local processes that a small kubelet restarts
whenever one exits non-zero (restartPolicy OnFailure). Each trial waits for the attempt
to train, then at a random instant, uniform or just after the store shows a save reaching
one of its points (DCP write, part record, manifest, LATEST, retention) plus a jitter,
does one of:
- rank: SIGKILL one torch worker (its agent restarts the workers in place);
- pod: SIGKILL every process of one pod at once, as a node loss does (the processes are
  stopped first, so none outlives the others);
- job: the same to every pod (a re-apply starts them again);
- sigterm: SIGTERM to one pod's agent (a preemption: an emergency save starts), then
  SIGKILL of the pod within a random grace of up to 2.5 s;
- outage (S3 chains only): the store answers every request `503 Slow Down` for 1 to 6 s
  (a proxy in front of it), then one pod is SIGKILLed as above, whatever the outage left;
- full (file chains, as root: the store lies on a small tmpfs of its own): the store's
  disk fills for 1 to 4 s (every write fails with ENOSPC), then is freed, then one pod is
  SIGKILLed as above.
Chains alternate between the stores asked for: `file` (a file:// store, where DCP writes
in place, so every stage of a save shows) and `s3` (moto's S3 server in its own process,
behind tests/fault_proxy.py; each rank's files are uploaded after DCP wrote them, so
there the `dcp_write` point is the upload).
A third of the restarts come with a slow store for the attempt they start (each save
waits before it writes and before its part is recorded), so later kills land in long
saves. The trial ends when the next attempt has chosen its checkpoint, and checks:
- resumed: it starts from the newest checkpoint the earlier attempts committed;
- whole: every committed checkpoint holds one step's state, weights and optimizer alike;
- rng: each rank holds the RNG state its own rank saved in that checkpoint once it is
  restored (the ranks' states differ: FuzzModel draws once per rank before the fit);
- reads: what each node fetched is exactly the files the manifest names, though a decoy
  file lay beside them in the store;
and, when the job finishes, that its outputs hold every validation sample once per epoch.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import logging
import os
import random
import re
import signal
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operator_client.contract import checkpoint_name
from operator_client.render import render
from operator_client.runstore import checkpoints
from operator_client.runstore.location import run_root
from operator_client.spec import load_job_text
from operator_client.storage import ObjectStore, StoreError, open_store

from .conftest import ROOT, job_yaml
from .fault_proxy import FaultProxy
from .moto_process import moto_bucket
from .replicas import Launch, is_worker, launches, processes

SAVE_EVERY = 4
EPOCH = 8  # steps: FuzzData's 256 samples over 2 ranks in batches of 16
EPOCHS = 40
VAL_SAMPLES = 32
KINDS = ("rank", "pod", "job", "sigterm", "outage", "full")
ONLY_ON = {"outage": "s3", "full": "file"}  # a 503 needs the proxy, a full disk a tmpfs
DISK = "64m"  # the tmpfs of a file chain that may fill its disk: the whole run fits
STORES = ("file", "s3")
BUCKET = "fuzz"
POINTS = ("uniform", "dcp_write", "part_record", "manifest", "latest", "retention")
DECOY = "__7_0.distcp"
RESUMED = re.compile(r"attempt (\d+): resuming from \S+ \(step (\d+),")
FRESH = re.compile(r"attempt (\d+): no committed checkpoint, starting fresh")
STEP_DIR = re.compile(rf"{checkpoints.PREFIX}/step-(\d+)")
UNVALIDATED = re.compile(r"before epoch (\d+)'s validation: saving first")
PROGRESS = re.compile(r'kctl-train\.progress \{[^\n]*"step":(\d+)')


@dataclass
class Trial:
    """One kill and what the next attempt did."""

    number: int
    kind: str
    point: str
    store: str  # file or s3
    slow: bool  # the killed attempt had a slow store
    reached: int  # the last step the killed attempt reported
    resumed: int | None = None  # the step the next attempt started from (None: fresh)
    newest: int | None = None  # the newest checkpoint the earlier attempts committed
    torn: list[str] = field(default_factory=list)
    rng: bool | None = None  # None: nothing restored, nothing to compare
    reads: bool | None = None
    seconds: float = 0.0
    flight: int | None = None  # a save of a later step being written at the kill

    @property
    def resumed_newest(self) -> bool:
        return self.resumed == self.newest

    @property
    def lost(self) -> int:
        """Steps redone: reported by the killed attempt, after what the next resumed."""
        return max(0, self.reached - (self.resumed or 0))

    @property
    def ok(self) -> bool:
        return (
            self.resumed_newest
            and not self.torn
            and self.rng is not False
            and (self.reads is not False)
        )


@dataclass
class Pod:
    """A replica as a kubelet keeps it: started again with its launch when it exits."""

    launch: Launch
    process: subprocess.Popen[bytes] | None = None
    slow: bool = False  # started with a slow store

    def start(self, extra: dict[str, str]) -> None:
        self.slow = bool(extra)
        self.process = self.launch.popen(extra, mode="ab")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def log(self) -> Path:
        return self.launch.log


def tree(pid: int) -> list[int]:
    """The process and all its descendants."""
    table = processes()
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += [p for p, (parent, _) in table.items() if parent == current]
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_all(pids: list[int]) -> None:
    """SIGKILL every process at once: stopped first, so that none reacts to another's
    death (a worker of a killed agent lives on with parent 1 otherwise)."""
    _signal_all(pids, signal.SIGSTOP)
    _signal_all(pids, signal.SIGKILL)


class Job:
    """A rendered job's replicas as local processes, restarted as a kubelet does."""

    def __init__(self, manifest: dict[str, Any], workdir: Path, env: dict[str, str]) -> None:
        self.pods = [Pod(launch) for launch in launches(manifest, workdir, env)]
        self.extra: dict[str, str] = {}  # for the pods started next (a slow store)
        self._read = [0] * len(self.pods)  # bytes of each pod's log read so far
        self._rank0: list[tuple[str, int, int, str]] = []  # (time, pod, order, line)
        self._sorted, self._text = 0, ""
        for pod in self.pods:
            pod.start(self.extra)

    def tend(self) -> bool:
        """Restart every pod that exited non-zero; True once every pod exited 0."""
        done = True
        for pod in self.pods:
            assert pod.process is not None
            code = pod.process.poll()
            if code != 0:
                done = False
            if code is not None and code != 0:
                pod.start(self.extra)
        return done

    def workers(self, pod: Pod) -> list[int]:
        table = processes()
        return [p for p in tree(pod.pid) if p in table and is_worker(p, table)]

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Every process of the job stopped (SIGSTOP) for the duration."""
        pids = [p for pod in self.pods for p in tree(pod.pid)]
        _signal_all(pids, signal.SIGSTOP)
        try:
            yield
        finally:
            _signal_all(pids, signal.SIGCONT)

    def rank0_log(self) -> str:
        """Rank 0's lines, whichever pod it ran in (a rendezvous after a restart may give
        node rank 0 to the Worker pod), in the order of their times. Read on from where
        the last call stopped."""
        for order, pod in enumerate(self.pods):
            if not pod.log.exists():
                continue
            with pod.log.open("rb") as log:
                log.seek(self._read[order])
                new = log.read()
            complete = new[: new.rfind(b"\n") + 1]  # a line still being written waits
            self._read[order] += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                if line[8:18] == " [rank 0] ":
                    self._rank0.append((line[:8], order, len(self._rank0), line))
        if len(self._rank0) != self._sorted:
            self._rank0.sort()
            self._sorted = len(self._rank0)
            self._text = "".join(line + "\n" for *_, line in self._rank0)
        return self._text

    def logs(self) -> str:
        """The end of every pod's log, for a failure's message."""
        return "\n".join(f"--- {p.launch.name}\n{p.log.read_text(errors='replace')[-3000:]}"
                         for p in self.pods)  # fmt: skip

    def stop(self) -> None:
        kill_all([p for pod in self.pods for p in tree(pod.pid)])
        for pod in self.pods:
            if pod.process is not None:
                pod.process.wait()


def fuzz_job(name: str, storage: str) -> dict[str, Any]:
    text = job_yaml(
        name,
        f"""\
  train:
    model: tests.stamp:FuzzModel
    data: tests.stamp:FuzzData
    trainer: {{max_steps: {EPOCHS * EPOCH}, log_every_n_steps: 1, num_sanity_val_steps: 0}}
  nodes: 2
  fault: {{maxRestarts: 1000}}
  checkpoint: {{every: {SAVE_EVERY} steps, keep: 4}}
  storage: {storage}
""",
    )
    manifest: dict[str, Any] = render(load_job_text(text).job)
    return manifest


class Store:
    """What the store shows of the saves, read as the save path writes it: its keys and
    LATEST, and every commit ever seen (retention deletes them later)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.seen: dict[str, checkpoints.Manifest] = {}  # by key@attempt
        self.manifests: set[str] = set()
        self.now: tuple[set[str], bytes] = (set(), b"")

    def poll(self) -> tuple[set[str], bytes]:
        try:
            keys = {o.key for o in self.store.list(checkpoints.PREFIX + "/")}
            latest = self.store.get_bytes(checkpoints.LATEST) if checkpoints.LATEST in keys else b""
        except StoreError:
            return self.now
        manifests = {k for k in keys if k.endswith("/" + checkpoints.MANIFEST)}
        if manifests != self.manifests:
            self.manifests = manifests
            for manifest in checkpoints.committed(self.store):
                self.seen.setdefault(f"{manifest.key}@{manifest.attempt}", manifest)
        self.now = (keys, latest)
        return self.now


def _dir(key: str) -> str:
    """A key's checkpoint directory: a checkpoint is everything below checkpoints/<step>/
    (its part records included), as retention takes it."""
    return "/".join(key.split("/", 2)[:2])


def _committed_dirs(keys: set[str]) -> set[str]:
    return {_dir(k) for k in keys if k.endswith("/" + checkpoints.MANIFEST)}


def reached(point: str, before: tuple[set[str], bytes], now: tuple[set[str], bytes]) -> bool:
    """Whether the store shows a save past `point` since `before` was read."""
    (old, old_latest), (keys, latest) = before, now
    new = keys - old
    committed = _committed_dirs(keys)
    uncommitted = [k for k in new if _dir(k) not in committed]
    if point == "dcp_write":
        return any(k.endswith(".distcp") for k in uncommitted)
    if point == "part_record":
        return any("/parts/" in k for k in uncommitted)
    if point == "manifest":
        return any(k.endswith("/" + checkpoints.MANIFEST) for k in new)
    if point == "latest":
        return latest != old_latest
    if point == "retention":
        return bool(_committed_dirs(old) - committed)
    raise ValueError(point)


def in_flight(keys: set[str]) -> int | None:
    """The newest step a save has begun writing to the store and not committed."""
    committed = _committed_dirs(keys)
    dirs = {_dir(k) for k in keys} - committed
    steps = [int(m[1]) for d in dirs if (m := STEP_DIR.fullmatch(d))]
    return max(steps, default=None)


def _attempts(log: str) -> list[tuple[int, int | None]]:
    """Every attempt rank 0 began, with the step it resumed from (None: fresh)."""
    found: list[tuple[int, int, int | None]] = [
        (m.start(), int(m[1]), int(m[2])) for m in RESUMED.finditer(log)
    ]
    found += [(m.start(), int(m[1]), None) for m in FRESH.finditer(log)]
    return [(attempt, step) for _, attempt, step in sorted(found, key=lambda f: f[0])]


def _after(log: str, lines: int) -> str:
    """The log past its first `lines` lines."""
    return "".join(log.splitlines(keepends=True)[lines:])


def _last_step(log: str) -> int:
    steps = PROGRESS.findall(log)
    return int(steps[-1]) if steps else 0


class Chain:
    """One job, killed trial after trial until it finishes."""

    def __init__(
        self,
        workdir: Path,
        name: str,
        rng: random.Random,
        kinds: tuple[str, ...] = KINDS,
        s3: tuple[str, FaultProxy] | None = None,
    ) -> None:
        """`s3`: moto's endpoint and the proxy in front of it (the job's store is then S3,
        through the proxy; this side reads it directly), else a file:// store."""
        self.workdir, self.rng = workdir, rng
        self.where = where = "s3" if s3 else "file"
        self.kinds = tuple(k for k in kinds if ONLY_ON.get(k, where) == where)
        self.proxy = s3[1] if s3 else None
        self.fuzz_dir = workdir / "fuzz"
        self.fuzz_dir.mkdir(parents=True)
        self.disk: Path | None = None  # the tmpfs the file store lies on, when it may fill
        if "full" in self.kinds:
            self.disk = workdir / "disk"
            self.disk.mkdir()
            mount = ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(self.disk)]
            if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode:
                self.disk = None  # no tmpfs here: no full disk either
                self.kinds = tuple(k for k in self.kinds if k != "full")
        if not self.kinds:
            raise ValueError(f"none of the kinds {kinds} can be drawn on a {where} store here "
                             "(a full disk needs root, to mount a tmpfs)")  # fmt: skip
        if s3:
            storage = f"{{uri: 's3://{BUCKET}/runs', endpoint: '{s3[1].endpoint}'}}"
            store = open_store(run_root(f"s3://{BUCKET}/runs", "default", name), endpoint=s3[0])
        else:
            uri = ((self.disk or workdir) / "store").as_uri()
            storage = f"{{uri: '{uri}'}}"
            store = open_store(run_root(uri, "default", name))
        self.manifest = fuzz_job(name, storage)
        self.store = Store(store)
        env = {"PYTHONPATH": str(ROOT), "KCTL_FUZZ_DIR": str(self.fuzz_dir)}
        self.job = Job(self.manifest, workdir / "pods", env)
        self.checked: set[str] = set()
        self.finished = False

    def wait(self, until: Callable[[], bool], timeout: float, *, must: bool = True) -> bool:
        """Tend the pods and watch the store until `until()` (True), the job finished, or
        `timeout` seconds passed (False, or AssertionError when it `must`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.job.tend():
                self.finished = True
                return until()
            self.store.poll()
            if until():
                return True
            time.sleep(0.02)  # often enough for a save's stages, light for the job
        if must:
            raise AssertionError(f"no progress in {timeout}s\n{self.job.logs()}")
        return False

    def trial(self, number: int) -> Trial | None:
        """One kill and its checks (None: the job finished before the kill)."""
        started = time.monotonic()
        mark = self.job.rank0_log().count("\n")  # the current attempt's training, after it
        self.wait(lambda: _last_step(_after(self.job.rank0_log(), mark)) > 0, 240)
        if self.finished:
            return None
        attempts = len(_attempts(self.job.rank0_log()))  # its line is out by now
        kind, point = self.rng.choice(self.kinds), self.rng.choice(POINTS)
        slow = any(pod.slow for pod in self.job.pods)
        if point == "uniform":
            end = time.monotonic() + self.rng.uniform(0.0, 2.5)
            self.wait(lambda: time.monotonic() >= end, 60)
        else:
            before = self.store.poll()
            if not self.wait(lambda: reached(point, before, self.store.now), 4.0, must=False):
                point = "uniform"  # no save got there within 4 s (nothing to retire yet)
            time.sleep(self.rng.uniform(0.0, 0.04))
        if self.finished:
            return None
        self._plant_decoy()
        reached_step = _last_step(self.job.rank0_log())
        probes = {rank: self._probe_size(rank) for rank in (0, 1)}
        self.job.extra = (
            {
                "KCTL_TRAIN_CHECKPOINT_WRITE_DELAY": f"{self.rng.uniform(0.1, 0.6):.2f}",
                "KCTL_TRAIN_CHECKPOINT_UPLOAD_DELAY": f"{self.rng.uniform(0.1, 0.6):.2f}",
            }
            if self.rng.random() < 1 / 3
            else {}
        )
        flight = in_flight(self.store.poll()[0])
        self._kill(kind)
        self.wait(lambda: len(_attempts(self.job.rank0_log())) > attempts, 240)
        if self.finished and len(_attempts(self.job.rank0_log())) <= attempts:
            return None
        attempt, resumed = _attempts(self.job.rank0_log())[-1]
        if resumed is not None:  # each rank has restored it once its probe wrote
            self.wait(lambda: len(self._probes(resumed, probes)) == 2, 120, must=False)
        with self.job.frozen():  # retention must not delete what is checked
            earlier = sorted(
                (m for m in self.store.seen.values() if m.attempt < attempt),
                key=lambda m: (m.attempt, m.step),
            )
            result = Trial(number, kind, point, self.where, slow, reached_step, resumed,
                           earlier[-1].step if earlier else None)  # fmt: skip
            result.torn = self._torn()
            result.flight = flight if flight and flight > (result.newest or 0) else None
            if resumed is not None:
                result.rng = self._rng(resumed, self._probes(resumed, probes))
                result.reads = self._reads(resumed)
        result.seconds = time.monotonic() - started
        return result

    def _kill(self, kind: str) -> None:
        pods = self.job.pods
        if kind == "rank":
            pod = self.rng.choice(pods)
            workers = self.job.workers(pod)
            if workers:
                kill_all([self.rng.choice(workers)])
        elif kind == "pod":
            kill_all(tree(self.rng.choice(pods).pid))
        elif kind == "job":
            kill_all([p for pod in pods for p in tree(pod.pid)])
        elif kind == "outage":
            assert self.proxy is not None
            self.proxy.mode = "503"
            end = time.monotonic() + self.rng.uniform(1.0, 6.0)
            try:
                self.wait(lambda: time.monotonic() >= end, 60)
            finally:
                self.proxy.mode = "pass"
            kill_all(tree(self.rng.choice(pods).pid))
        elif kind == "full":
            assert self.disk is not None
            filler = self.disk / "filler"  # beside the store: not a file inside it
            with contextlib.suppress(OSError), filler.open("wb") as out:
                while True:  # until ENOSPC: whatever the pods write next fails
                    out.write(b"\0" * (1 << 20))
            end = time.monotonic() + self.rng.uniform(1.0, 4.0)
            try:
                self.wait(lambda: time.monotonic() >= end, 60)
            finally:
                filler.unlink()
            kill_all(tree(self.rng.choice(pods).pid))
        else:
            pod = self.rng.choice(pods)
            os.kill(pod.pid, signal.SIGTERM)
            grace = time.monotonic() + self.rng.uniform(0.0, 2.5)
            while time.monotonic() < grace and pod.process is not None:
                if pod.process.poll() is not None:
                    return
                time.sleep(0.01)
            kill_all(tree(pod.pid))

    def _plant_decoy(self) -> None:
        """A file no manifest names, in the newest committed checkpoint's directory."""
        found = checkpoints.committed(self.store.store)
        if found:
            with contextlib.suppress(StoreError):
                self.store.store.put_bytes(f"{found[0].key}/{DECOY}", b"not a checkpoint")

    def _load(self, manifest: checkpoints.Manifest) -> dict[str, Any] | None:
        from operator_client.runtime import checkpoint_format

        dest = self.workdir / "check" / f"{manifest.key}@{manifest.attempt}"
        path = checkpoints.fetch(self.store.store, manifest, dest)
        return None if path is None else checkpoint_format.load(path)

    def _torn(self) -> list[str]:
        """Committed checkpoints not yet checked that hold more than one step's state."""
        torn = []
        for manifest in checkpoints.committed(self.store.store):
            name = f"{manifest.key}@{manifest.attempt}"
            if name in self.checked:
                continue
            state = self._load(manifest)
            if state is None:
                continue  # deleted by retention meanwhile, or torn: fetch verifies
            self.checked.add(name)
            weights = state["state_dict"]["w"]
            stamp = state["optimizer_states"][0]["state"][0]["stamp"]
            values = {weights.min().item(), weights.max().item(), stamp.min().item(),
                      stamp.max().item(), float(state["global_step"])}  # fmt: skip
            if values != {float(manifest.step)}:
                torn.append(f"{name}: {sorted(values)}")
        return torn

    def _probe_size(self, rank: int) -> int:
        path = self.fuzz_dir / f"rng-{rank}.jsonl"
        return path.stat().st_size if path.exists() else 0

    def _probes(self, step: int, since: dict[int, int]) -> dict[int, str]:
        """The RNG digests each rank held after restoring `step`, written since `since`."""
        found = {}
        for rank, offset in since.items():
            path = self.fuzz_dir / f"rng-{rank}.jsonl"
            if not path.exists():
                continue
            with path.open("rb") as lines:
                lines.seek(offset)
                for line in lines:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # a line a kill cut
                    if entry.get("step") == step:
                        found[rank] = entry["rng"]
        return found

    def _rng(self, step: int, began: dict[int, str]) -> bool | None:
        """Whether each rank restored the RNG its own rank saved at `step` (None: the
        checkpoint has no RNG states to compare)."""
        from operator_client.runtime.checkpoint_format import RNG_KEY

        manifest = next((m for m in checkpoints.committed(self.store.store) if m.step == step),
                        None)  # fmt: skip
        state = self._load(manifest) if manifest else None
        if state is None or RNG_KEY not in state:
            return None
        saved = {
            rank: hashlib.sha256(states["torch"].numpy().tobytes()).hexdigest()
            for rank, states in state[RNG_KEY].items()
        }
        return len(began) == 2 and all(saved.get(rank) == began[rank] for rank in began)

    def _reads(self, step: int) -> bool | None:
        """Whether every node's fetched copy of the checkpoint holds just its members."""
        manifest = next((m for m in checkpoints.committed(self.store.store) if m.step == step),
                        None)  # fmt: skip
        if manifest is None:
            return None
        names = {m.name for m in manifest.members}
        fetched = list((self.workdir / "pods").glob(f"*/kctl-train/*/*/node-*/resume/"
                                                    f"{checkpoint_name(step)}"))  # fmt: skip
        if not fetched:
            return None
        return all(
            {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()} <= names
            and DECOY not in {p.name for p in d.rglob("*")}
            for d in fetched
        )

    def finish(self) -> list[str]:
        """Let the job finish; what is wrong with its outputs ([] when every validation
        sample is there once per epoch)."""
        self.job.extra = {}
        if not self.finished:
            self.wait(lambda: self.finished, 600)
        store = self.store.store
        try:
            text = store.get_bytes("outputs/val/all.csv", limit=1 << 26).decode()
        except StoreError as exc:
            return [f"no outputs: {exc}"]
        rows = list(csv.DictReader(io.StringIO(text)))
        counts = Counter((r["epoch"], r["sample"]) for r in rows)
        problems = [f"epoch {e} sample {s} counted {n} times" for (e, s), n in counts.items()
                    if n != 1]  # fmt: skip
        # An emergency save on the batch before a validation that does not fit the grace
        # period beside it is taken first, and says so: that epoch is not validated.
        unvalidated = {int(e) for e in UNVALIDATED.findall(self.job.rank0_log())}
        expected = {(str(e), str(s)) for e in range(EPOCHS) if e not in unvalidated
                    for s in range(VAL_SAMPLES)}  # fmt: skip
        if set(counts) != expected:
            epochs = {e for e, _ in counts}
            problems.append(
                f"{len(counts)} (epoch, sample) pairs over {len(epochs)} epochs, not "
                f"{VAL_SAMPLES} in each of {EPOCHS} but {sorted(unvalidated)}"
            )
        return problems

    def close(self) -> None:
        try:
            self.job.stop()
        finally:  # the tmpfs is unmounted even when a pod could not be ended
            if self.disk is not None:
                subprocess.run(["umount", "-l", str(self.disk)], check=False)


@dataclass
class Result:
    trials: list[Trial]
    output_problems: list[str]

    @property
    def torn(self) -> int:
        return sum(bool(t.torn) for t in self.trials)

    @property
    def resumed(self) -> int:
        return sum(t.resumed_newest for t in self.trials)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.trials) and not self.output_problems

    def lines(self) -> list[str]:
        """The report: coverage, work lost, failures; the last line as the issue asks."""
        trials = self.trials
        out = []
        pairs = Counter((t.kind, t.point) for t in trials)
        out.append("kill points covered (kind x point: trials):")
        for kind in (k for k in KINDS if any(t.kind == k for t in trials)):
            cells = [f"{point} {pairs[(kind, point)]}" for point in POINTS]
            out.append(f"  {kind:<8} " + ", ".join(cells))
        stores = Counter(t.store for t in trials)
        out.append(f"  with a slow store: {sum(t.slow for t in trials)}; "
                   + ", ".join(f"on {k}: {n}" for k, n in sorted(stores.items())))  # fmt: skip
        lost = [t.lost / SAVE_EVERY for t in trials]
        if lost:
            p90 = statistics.quantiles(lost, n=10, method="inclusive")[-1] if lost[1:] else lost[0]
            out.append(
                f"work lost per kill, in save intervals ({SAVE_EVERY} steps): median "
                f"{statistics.median(lost):.2f}, p90 {p90:.2f}, max {max(lost):.2f}; "
                f"more than one interval: {sum(x > 1 for x in lost)} of {len(lost)}, "
                f"{sum(t.lost > SAVE_EVERY and t.flight is not None for t in trials)} of them "
                "killed while a later save was being written"
            )
        checked_rng = [t for t in trials if t.rng is not None]
        checked_reads = [t for t in trials if t.reads is not None]
        out.append(
            f"RNG restored per rank: {sum(bool(t.rng) for t in checked_rng)} of "
            f"{len(checked_rng)} resumes; reads only what the manifest names: "
            f"{sum(bool(t.reads) for t in checked_reads)} of {len(checked_reads)}"
        )
        for t in trials:
            if not t.ok:
                out.append(f"FAILED trial {t.number}: {t}")
        out += [f"FAILED outputs: {p}" for p in self.output_problems]
        out.append(f"{len(trials)} trials, {self.torn} torn, {self.resumed} resumed from the "
                   "newest commit")  # fmt: skip
        return out


def run(
    trials: int,
    seed: int,
    workdir: Path,
    say: Callable[[str], None] = print,
    kinds: tuple[str, ...] = KINDS,
    stores: tuple[str, ...] = ("file",),
) -> Result:
    """`trials` kills of the given kinds over as many jobs as it takes, each job run to
    its end, the jobs' stores taking turns among `stores`."""
    # The checks read checkpoints that retention may be deleting: no warnings for those.
    logging.getLogger("kctl_train").setLevel(logging.ERROR)
    rng = random.Random(seed)
    done: list[Trial] = []
    problems: list[str] = []
    chain_number = 0
    # A store none of the kinds can be drawn on takes no turn.
    stores = tuple(w for w in stores if any(ONLY_ON.get(k, w) == w for k in kinds))
    if not stores:
        raise ValueError(f"none of the kinds {kinds} can be drawn on any store asked for")
    with contextlib.ExitStack() as stack:
        s3 = None
        if "s3" in stores:
            endpoint = stack.enter_context(moto_bucket(BUCKET))
            s3 = (endpoint, stack.enter_context(FaultProxy(endpoint, seed=seed)))
        while len(done) < trials:
            chain_number += 1
            on_s3 = stores[(chain_number - 1) % len(stores)] == "s3"
            chain = Chain(
                workdir / f"job-{chain_number}", f"fuzz{chain_number}", rng, kinds,
                s3 if on_s3 else None,
            )  # fmt: skip
            problems += _run_chain(chain, chain_number, trials, done, say)
    return Result(done, problems)


def _run_chain(
    chain: Chain, number: int, trials: int, done: list[Trial], say: Callable[[str], None]
) -> list[str]:
    """Trials on one job until `done` holds `trials` or the job finished (appending to
    `done`); what is wrong with its outputs."""
    try:
        while len(done) < trials:
            found = chain.trial(len(done) + 1)
            if found is None:
                break
            done.append(found)
            say(
                f"trial {found.number}: {found.kind} at {found.point}"
                f"{' (slow store)' if found.slow else ''} on {found.store}, step "
                f"{found.reached} -> resumed {found.resumed} (newest {found.newest}), "
                f"{'ok' if found.ok else 'FAILED'} in {found.seconds:.1f}s"
            )
        return [f"job {number}: {p}" for p in chain.finish()]
    finally:
        chain.close()
