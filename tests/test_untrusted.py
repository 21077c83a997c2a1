"""What a pod (or anyone who can write a store) wrote is hostile input on the host: regular
files only, never through a link, never blocking on a FIFO or a device, bounded; any JSON
shape is a clear refusal naming the document, never a traceback (issue 20, item 2 and 6)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operator_client.backends.local.jobdir import LocalStatus
from operator_client.backends.local.logs import MAX_LINE, LogFollower, tail
from operator_client.collect.collect import CollectError, collect
from operator_client.runstore import checkpoints
from operator_client.runstore.aggregate import AggregateManifest, _epoch_manifest
from operator_client.storage import StoreError, open_store
from operator_client.storage.file import FileStore
from operator_client.untrusted import (
    UntrustedFileError,
    open_regular,
    read_bytes,
    read_tail,
    regular_files,
)

from .test_collect import make_run


def finishes(call: Any, seconds: float = 10) -> Any:
    """Run `call` in a thread; fail (instead of hanging the suite) if it blocks."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(_outcome(call)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"
    outcome = result[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _outcome(call: Any) -> Any:
    try:
        return call()
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(
    ("plant", "refusal"),
    [
        (lambda p: os.mkfifo(p), "a FIFO"),
        (lambda p: p.symlink_to("/etc/passwd"), "a symbolic link"),
        (lambda p: p.mkdir(), "a directory"),
        (lambda p: os.symlink("/dev/zero", p), "a symbolic link"),
    ],
)
def test_only_regular_files_are_read_and_nothing_blocks(
    tmp_path: Path, plant: Any, refusal: str
) -> None:
    path = tmp_path / "MANIFEST.json"
    plant(path)
    with pytest.raises(UntrustedFileError, match=refusal):
        finishes(lambda: read_bytes(path))


def test_a_device_and_a_link_on_the_way_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UntrustedFileError, match="a character device"):
        finishes(lambda: read_bytes(Path("/dev/zero")))
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x.json").write_text("{}")
    (tmp_path / "via").symlink_to(tmp_path / "real")
    assert read_bytes(tmp_path / "real" / "x.json", root=tmp_path) == b"{}"
    with pytest.raises(UntrustedFileError, match="on the way is a link"):
        read_bytes(tmp_path / "via" / "x.json", root=tmp_path)


def test_reads_are_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1000)
    with pytest.raises(UntrustedFileError, match="larger than 999 bytes"):
        read_bytes(big, limit=999)
    assert read_tail(big, 10) == b"x" * 10
    assert read_tail(tmp_path / "missing", 10) == b""
    fd = open_regular(big)
    os.close(fd)


def test_listings_pass_over_links_fifos_and_sockets(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "file").write_text("1")
    os.mkfifo(tmp_path / "a" / "fifo")
    (tmp_path / "a" / "link").symlink_to(tmp_path / "a" / "file")
    (tmp_path / "dirlink").symlink_to(tmp_path / "a")
    assert sorted(regular_files(tmp_path)) == [("a/file", 1)]


def test_a_hostile_file_store_is_refused_with_the_key(tmp_path: Path) -> None:
    """A FIFO at a manifest's path, a link at run.json: a clear StoreError, at once."""
    store = FileStore(tmp_path)
    (tmp_path / "checkpoints" / "step-000000000001").mkdir(parents=True)
    os.mkfifo(tmp_path / "checkpoints" / "step-000000000001" / "MANIFEST.json")
    (tmp_path / "run.json").symlink_to("/etc/passwd")
    assert store.list() == []
    with pytest.raises(StoreError, match=r"checkpoints/step-000000000001/MANIFEST.json: .*a FIFO"):
        finishes(lambda: store.get_bytes("checkpoints/step-000000000001/MANIFEST.json"))
    with pytest.raises(StoreError, match=r"run.json: .*a symbolic link"):
        store.get_file("run.json", tmp_path / "out" / "run.json")
    assert not (tmp_path / "out" / "run.json").exists()
    assert finishes(lambda: checkpoints.committed(store)) == []


def test_log_lines_are_cut_and_reads_bounded(tmp_path: Path) -> None:
    log = tmp_path / "pod.log"
    log.write_bytes(b"short\n" + b"y" * (3 * MAX_LINE + 5))
    follower = LogFollower({"pod": log})
    lines = follower.poll()
    assert lines[0] == ("pod", "short") and all(len(t) == MAX_LINE for _, t in lines[1:])
    assert [len(t) for _, t in follower.poll(final=True)] == [5]
    assert max(len(line) for line in tail(log, 3)) <= MAX_LINE


# Shapes of JSON that are not what kctl-train writes: every parser refuses each with a
# ValueError (never a TypeError, KeyError or AttributeError).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
MANIFEST_FIELDS: dict[str, Any] = {
    "step": 1, "epoch": 0, "attempt": 1, "world_size": 2, "created": 1.0,
    "members": [{"name": "model.ckpt", "size": 3, "sha256": "a" * 64}],
}  # fmt: skip


def _mutated(base: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    doc = dict(base)
    for key in data.draw(st.lists(st.sampled_from(sorted(base)), max_size=3)):
        doc[key] = data.draw(json_values)
    return doc


@settings(max_examples=150, deadline=None)
@given(value=json_values)
def test_any_json_is_a_manifest_or_a_value_error(value: Any) -> None:
    raw = json.dumps(value).encode()
    for parse in (checkpoints.Manifest.from_json, AggregateManifest.from_json, _epoch_manifest):
        with contextlib.suppress(ValueError):
            parse(raw)
    with contextlib.suppress(ValueError):
        LocalStatus.from_json(value)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_near_miss_manifests_are_value_errors(data: st.DataObject) -> None:
    doc = _mutated(MANIFEST_FIELDS, data)
    if data.draw(st.booleans()):
        doc["members"] = [_mutated(MANIFEST_FIELDS["members"][0], data)]
    try:
        manifest = checkpoints.Manifest.from_json(json.dumps(doc).encode())
    except ValueError:
        return
    assert isinstance(manifest.step, int) and not isinstance(manifest.step, bool)
    assert all(isinstance(m.name, str) and isinstance(m.size, int) for m in manifest.members)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"step": "40"}, "field 'step' must be a whole number"),
        ({"step": 40.5}, "field 'step' must be a whole number"),
        ({"members": [{"name": ["model.ckpt"], "size": 1, "sha256": "a" * 64}]}, "'name'"),
        ({"members": [{"name": "model.ckpt", "size": "65536", "sha256": "a" * 64}]}, "'size'"),
    ],
)
def test_collect_skips_a_manifest_of_another_shape_and_says_why(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    store = FileStore(tmp_path / "run")
    (tmp_path / "scratch").mkdir()
    make_run(store, tmp_path / "scratch")
    key = "checkpoints/step-000000000040/MANIFEST.json"
    doc = json.loads(store.get_bytes(key))
    store.put_bytes(key, json.dumps({**doc, **change}).encode())
    result = collect(store, tmp_path / "out", all_checkpoints=True)
    assert any(key in p and named in p for p in result.problems), result.problems
    assert [c["step"] for c in result.summary["checkpoints"]] == [20]


def test_a_key_too_long_for_this_disk_is_refused_before_anything_is_written(
    tmp_path: Path, moto_endpoint: str, bucket: str
) -> None:
    store = open_store(f"s3://{bucket}/runs/default/j/", endpoint=moto_endpoint)
    (tmp_path / "scratch").mkdir()
    make_run(store, tmp_path / "scratch")
    store.put_bytes("monitor/" + "x" * 1000 + ".csv", b"1")
    with pytest.raises(CollectError, match="segment longer than 255 bytes"):
        collect(store, tmp_path / "out")
    assert not (tmp_path / "out").exists()
