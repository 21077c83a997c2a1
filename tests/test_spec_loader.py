"""Loading job.yaml: every problem at once, at file:line:column, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_client.spec import NodeRange, SpecError, load_job, load_job_text
from operator_client.spec.document import spec_document

HEAD = """\
apiVersion: kctl-train/v1alpha1
kind: TrainingJob
metadata:
  name: demo
spec:
  image: ghcr.io/acme/trainer:1.0
"""
TRAIN = "  train: {model: pkg.mod:Model}\n"


def errors_of(text: str) -> list[tuple[int, int, str, str]]:
    with pytest.raises(SpecError) as info:
        load_job_text(text, "job.yaml")
    return [(i.line, i.column, i.path, i.message) for i in info.value.issues]


def test_minimal_job_fills_visible_defaults() -> None:
    job = load_job_text(HEAD + TRAIN).job
    assert job.metadata.namespace == "default"
    assert job.spec.nodes == 1
    assert job.spec.processes_per_node == "auto"
    assert job.spec.resources.memory.text == "8Gi"
    assert job.spec.checkpoint.every.seconds == 1800
    assert job.spec.cleanup.pods == "Running"
    assert job.spec.cleanup.ttl_after_finished.seconds == 86400


def test_elastic_nodes_parse_as_a_range() -> None:
    job = load_job_text(HEAD + TRAIN + "  nodes: {min: 2, max: 4}\n").job
    assert job.spec.nodes == NodeRange(min=2, max=4)
    assert (job.elastic, job.min_nodes, job.max_nodes) == (True, 2, 4)


def test_numbers_are_accepted_where_kubernetes_wants_strings() -> None:
    job = load_job_text(
        HEAD + TRAIN + "  env: {OMP_NUM_THREADS: 4}\n  resources: {cpu: 8, memory: 16Gi}\n"
    ).job
    assert job.spec.env == {"OMP_NUM_THREADS": "4"}
    assert job.spec.resources.cpu.text == "8"


# (extra YAML under spec, expected line, column, field path, message part)
SPEC_ERRORS = [
    ("  nodse: 3\n", 8, 3, "spec.nodse", "unknown field 'nodse'; did you mean 'nodes'?"),
    ("  zzz: 3\n", 8, 3, "spec.zzz", "unknown field 'zzz' (allowed: checkpoint, cleanup"),
    ("  nodes: 0\n", 8, 10, "spec.nodes", "greater than or equal to 1"),
    ("  nodes: many\n", 8, 10, "spec.nodes", "valid integer"),
    ("  nodes: {min: 2}\n", 8, 10, "spec.nodes.max", "required field is missing"),
    ("  nodes: {min: 4, max: 2}\n", 8, 16, "spec.nodes.min", "min (4) is larger than max (2)"),
    ("  nodes: {min: 1, max: 2, mx: 3}\n", 8, 27, "spec.nodes.mx", "did you mean 'max'?"),
    ("  processesPerNode: all\n", 8, 21, "spec.processesPerNode", "expected 'auto', 'detect'"),
    ("  processesPerNode: detect\n", 8, 21, "spec.processesPerNode", "needs GPU nodes"),
    (
        "  processesPerNode: 4\n  resources: {gpus: 2}\n",
        8,
        21,
        "spec.processesPerNode",
        "4 processes on 2 GPUs",
    ),
    (
        "  resources: {memory: 64GB}\n",
        8,
        23,
        "spec.resources.memory",
        "'64GB' is not a Kubernetes quantity",
    ),
    (
        "  resources: {memory: 1Gi, sharedMemory: 2Gi}\n",
        8,
        42,
        "spec.resources.sharedMemory",
        "more than the node's memory",
    ),
    ("  resources: {cpu: '0'}\n", 8, 20, "spec.resources.cpu", "must be more than 0"),
    (
        "  resources: {gpuResource: gpu}\n",
        8,
        28,
        "spec.resources.gpuResource",
        "extended resource name",
    ),
    ("  nodePool: {preset: gek}\n", 8, 22, "spec.nodePool.preset", "did you mean 'gke'?"),
    (
        "  nodePool: {preset: eks, accelerator: h100}\n",
        8,
        40,
        "spec.nodePool.accelerator",
        "the 'eks' preset has no accelerator label",
    ),
    (
        "  nodePool: {tolerations: [{operator: Exists, value: x}]}\n",
        8,
        54,
        "spec.nodePool.tolerations[0].value",
        "takes no value",
    ),
    (
        "  nodePool: {tolerations: [{effect: NoSchedul}]}\n",
        8,
        37,
        "spec.nodePool.tolerations[0].effect",
        "did you mean 'NoSchedule'?",
    ),
    ("  network: {profile: ib}\n", 8, 22, "spec.network.profile", "'infiniband'"),
    (
        "  fault: {activeDeadline: 3 days}\n",
        8,
        27,
        "spec.fault.activeDeadline",
        "'3 days' is not a duration",
    ),
    ("  fault: {restartPolicy: Always}\n", 8, 26, "spec.fault.restartPolicy", "'OnFailure'"),
    (
        "  checkpoint: {every: 5 epochs}\n",
        8,
        23,
        "spec.checkpoint.every",
        "not a checkpoint interval",
    ),
    ("  checkpoint: {resume: latest}\n", 8, 24, "spec.checkpoint.resume", "use auto, never, best"),
    (
        "  checkpoint: {resume: best}\n",
        8,
        24,
        "spec.checkpoint.resume",
        "best needs spec.checkpoint.monitor",
    ),
    ("  checkpoint: {resume: -5}\n", 8, 24, "spec.checkpoint.resume", "greater than or equal to 0"),
    ("  storage: {uri: gs://bucket}\n", 8, 18, "spec.storage.uri", "s3://bucket/prefix"),
    (
        "  storage: {uri: 's3://bkt/x', accessKey: AKIA}\n",
        8,
        32,
        "spec.storage.accessKey",
        "unknown field 'accessKey'",
    ),
    (
        "  storage: {uri: 'file:///tmp/x', region: eu}\n",
        8,
        43,
        "spec.storage.region",
        "only s3:// stores",
    ),
    (
        "  env: {AWS_SECRET_ACCESS_KEY: abc}\n",
        8,
        32,
        "spec.env.AWS_SECRET_ACCESS_KEY",
        "never put credentials",
    ),
    ("  env: {WORLD_SIZE: '2'}\n", 8, 21, "spec.env.WORLD_SIZE", "set by the training-operator"),
    ("  env: {PET_NNODES: '2'}\n", 8, 21, "spec.env.PET_NNODES", "set by the training-operator"),
    ("  env: {1BAD: x}\n", 8, 9, "spec.env.1BAD", "environment variable names"),
    (
        "  env: {DEBUG: yes}\n",
        8,
        16,
        "spec.env.DEBUG",
        "quote the value: YAML reads it as the boolean true",
    ),
    ("  command: [python, train.py]\n", 8, 12, "spec.command", "not both"),
    ("  scheduling: {queue: Team_A}\n", 8, 23, "spec.scheduling.queue", "DNS-1123"),
    ("  cleanup: {pods: Some}\n", 8, 19, "spec.cleanup.pods", "'Running', 'All' or 'None'"),
    (
        "  fault: {terminationGracePeriod: 0s}\n",
        8,
        35,
        "spec.fault.terminationGracePeriod",
        "no time for the emergency checkpoint",
    ),
]


@pytest.mark.parametrize(
    ("extra", "line", "column", "path", "message"),
    SPEC_ERRORS,
    ids=[c[3] + ":" + c[4][:20] for c in SPEC_ERRORS],
)
def test_spec_errors_point_at_the_field(
    extra: str, line: int, column: int, path: str, message: str
) -> None:
    found = errors_of(HEAD + TRAIN + extra)
    assert len(found) == 1, found
    assert found[0][:3] == (line, column, path)
    assert message in found[0][3]


def test_train_errors() -> None:
    found = errors_of(HEAD + "  train: {model: not-an-import, trainer: {devices: 2}}\n")
    assert [(f[2], f[3][:30]) for f in found] == [
        ("spec.train.model", "'not-an-import' is not valid h"),
    ]
    found = errors_of(HEAD + "  train: {model: a.b:C, trainer: {devices: 2, strategy: ddp}}\n")
    assert [f[2] for f in found] == ["spec.train.trainer.devices", "spec.train.trainer.strategy"]
    # What would fail every rank at Trainer(...) (multiple values for a keyword), or drop the
    # runtime's checkpoints, report or goodput, is refused naming where it is said instead.
    owned = "{logger: true, callbacks: [], profiler: simple, enable_checkpointing: true}"
    found = errors_of(HEAD + f"  train: {{model: a.b:C, trainer: {owned}}}\n")
    assert [(f[2], f[3].split(" ")[1]) for f in found] == [
        ("spec.train.trainer.callbacks", "are"),
        ("spec.train.trainer.enable_checkpointing", "is"),
        ("spec.train.trainer.logger", "is"),
        ("spec.train.trainer.profiler", "is"),
    ]
    said = {f[2].rsplit(".", 1)[1]: f[3] for f in found}
    assert "list yours in spec.train.loggers" in said["logger"]
    assert "list yours in spec.train.callbacks" in said["callbacks"]
    assert all("remove" in said[k] for k in ("enable_checkpointing", "profiler"))


def test_loggers_and_callbacks() -> None:
    plugins = """\
  train:
    model: a.b:C
    loggers:
      - {class: lightning.pytorch.loggers:TensorBoardLogger, args: {name: tb}}
    callbacks:
      - {class: lightning.pytorch.callbacks:EarlyStopping, args: {monitor: val_loss}}
      - class: lightning.pytorch.callbacks:ModelCheckpoint
      - {class: not-a-path}
      - {class: a:B, arg: {}}
"""
    found = errors_of(HEAD + plugins)
    assert [f[2] for f in found] == [
        "spec.train.callbacks[2].class",
        "spec.train.callbacks[3].arg",
    ], found
    clean = plugins.split("      - class: lightning.pytorch.callbacks:ModelCheckpoint")[0]
    job = load_job_text(HEAD + clean).job
    assert job.spec.train is not None and job.spec.train.loggers is not None
    assert job.spec.train.loggers[0].class_ == "lightning.pytorch.loggers:TensorBoardLogger"
    document = spec_document(job)["spec"]["train"]
    assert document["loggers"] == [
        {"class": "lightning.pytorch.loggers:TensorBoardLogger", "args": {"name": "tb"}}
    ]
    found = errors_of(
        HEAD
        + plugins.replace("      - {class: not-a-path}\n", "").replace(
            "      - {class: a:B, arg: {}}\n", ""
        )
    )
    assert [(f[2], f[3].split(" would ")[0]) for f in found] == [
        ("spec.train.callbacks[1].class", "lightning.pytorch.callbacks:ModelCheckpoint")
    ]
    assert "spec.checkpoint" in found[0][3]


def test_nothing_to_run() -> None:
    assert errors_of(HEAD) == [
        (6, 3, "spec", "say what to run: give spec.train (Lightning import paths) or spec.command")
    ]


def test_every_problem_is_reported_at_once() -> None:
    text = HEAD + TRAIN + "  nodse: 3\n  resources: {gpus: -1, memory: lots}\n"
    text = text.replace("name: demo", "name: Demo_Job")
    found = errors_of(text)
    assert [f[2] for f in found] == [
        "metadata.name",
        "spec.nodse",
        "spec.resources.gpus",
        "spec.resources.memory",
    ]


@pytest.mark.parametrize(
    ("name_length", "nodes", "longest"),
    [
        (54, "4", "worker-2"),  # 54 + len("-worker-2") = 63: fits
        (55, "4", "worker-2"),
        (54, "11", "worker-9"),
        (54, "12", "worker-10"),
        (54, "{min: 1, max: 10}", "worker-9"),  # elastic: Workers 0..max-1
        (54, "{min: 1, max: 11}", "worker-10"),
        (54, "1", "master-0"),
        (55, "1", "master-0"),
    ],
)
def test_name_leaves_room_for_pod_names(name_length: int, nodes: str, longest: str) -> None:
    name = "a" * name_length
    text = (HEAD + TRAIN + f"  nodes: {nodes}\n").replace("name: demo", f"name: {name}")
    if name_length + 1 + len(longest) <= 63:
        load_job_text(text)
        return
    found = errors_of(text)
    assert found[0][2] == "metadata.name"
    assert (
        f"'{name}-{longest}' ({name_length + 1 + len(longest)} characters, at most 63)"
        in (found[0][3])
    )


def test_name_too_long_for_kubernetes_at_all() -> None:
    found = errors_of(HEAD.replace("name: demo", "name: " + "a" * 64) + TRAIN)
    assert found[0][2] == "metadata.name"
    assert "at most 63 characters" in found[0][3]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", 0, "file is empty"),
        ("# only a comment\n", 0, "file is empty"),
        ("- a\n- b\n", 1, "found a list"),
        ("just text\n", 1, "found a scalar 'just text'"),
        ("a: [b\n", 2, "YAML syntax error"),
        ("a: b\n---\nc: d\n", 2, "more than one YAML document"),
        ("a: b\n  c: d\n", 2, "YAML syntax error"),
        ("a: !!python/object:os.system x\n", 1, "YAML error"),
        ("a: *nope\n", 1, "YAML syntax error"),
        ("\t- tab\n", 1, "YAML syntax error"),
    ],
)
def test_yaml_problems_get_one_line(text: str, line: int, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_job_text(text, "job.yaml")
    (issue,) = info.value.issues
    assert issue.line == line
    assert message in issue.message
    assert "\n" not in str(issue)


def test_duplicate_and_non_string_keys() -> None:
    found = errors_of(HEAD + TRAIN + "  image: other\n  1: x\n")
    assert found == [
        (8, 3, "", "duplicate key 'image' (first at line 6)"),
        (9, 3, "", "key '1' must be a string (quote it)"),
    ]


def test_alias_bomb_is_refused() -> None:
    lol = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 7):
        lol += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]\n"
    found = errors_of(lol)
    assert "document too large" in found[0][3]


def test_wrong_kind_and_version() -> None:
    text = HEAD.replace("TrainingJob", "PyTorchJob").replace("v1alpha1", "v1") + TRAIN
    found = errors_of(text)
    assert [f[2] for f in found] == ["apiVersion", "kind"]
    assert "'kctl-train/v1alpha1'" in found[0][3]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00bad"), "not UTF-8"),
    ],
)
def test_file_problems(tmp_path: Path, setup, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "job.yaml"
    setup(path)
    with pytest.raises(SpecError) as info:
        load_job(path)
    assert str(info.value).startswith(f"{path}: error: {message}")


def test_warnings_carry_positions() -> None:
    loaded = load_job_text(HEAD + TRAIN + "  scheduling: {gang: volcano}\n", "job.yaml")
    assert [str(w) for w in loaded.warnings] == [
        "job.yaml:6:3: warning: spec.storage: no storage: checkpoints and outputs stay in the "
        "pods and are lost when they go",
        "job.yaml:8:22: warning: spec.scheduling.gang: gang scheduling takes effect only when "
        "the training-operator runs with --gang-scheduler-name=volcano",
    ]


def test_a_key_named_like_pydantics_marker_is_an_unknown_field() -> None:
    """Found by test_properties: a top-level key "[key]" left no path to name."""
    with pytest.raises(SpecError, match=r"unknown field '\[key\]'"):
        load_job_text('"[key]": null\n', "job.yaml")
