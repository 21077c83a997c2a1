"""The object-store interface, run against a directory and against a real S3 API (moto)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from operator_client.storage import (
    ObjectStore,
    StoreError,
    UnsafeKeyError,
    open_store,
    safe_relative_path,
)
from operator_client.storage.keys import contained_path


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "file":
        return open_store((tmp_path / "store").as_uri() + "/")
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = request.getfixturevalue("bucket")
    return open_store(f"s3://{bucket}/runs/a/", endpoint=endpoint)


def test_put_get_list_delete(store: ObjectStore, tmp_path: Path) -> None:
    store.put_bytes("x/one.txt", b"1")
    src = tmp_path / "src.bin"
    src.write_bytes(b"abc" * 1000)
    store.put_file("x/y/two.bin", src)
    assert [(o.key, o.size) for o in store.list("x/")] == [("x/one.txt", 1), ("x/y/two.bin", 3000)]
    assert store.get_bytes("x/one.txt") == b"1"
    dest = tmp_path / "out" / "two.bin"
    store.get_file("x/y/two.bin", dest)
    assert dest.read_bytes() == src.read_bytes()
    assert store.exists("x/one.txt") and not store.exists("x/one")
    store.delete(["x/one.txt", "x/missing"])
    assert [o.key for o in store.list()] == ["x/y/two.bin"]
    with pytest.raises(StoreError):
        store.get_bytes("x/one.txt")


def test_create_if_absent_is_a_conditional_create(store: ObjectStore) -> None:
    assert store.create_if_absent("attempts/1.json", b"first")
    assert not store.create_if_absent("attempts/1.json", b"second")
    assert store.get_bytes("attempts/1.json") == b"first"


def test_unknown_scheme() -> None:
    with pytest.raises(StoreError, match="unsupported store"):
        open_store("gs://bucket/x")


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/etc/passwd",
        "a/../../evil",
        "a/./b",
        "a//b",
        "..",
        "C:/x",
        "a\\b",
        "a\x00b",
        "\\\\server\\share",
    ],
)
def test_unsafe_keys_are_refused(key: str, tmp_path: Path) -> None:
    with pytest.raises(UnsafeKeyError):
        safe_relative_path(key)
    with pytest.raises(UnsafeKeyError):
        contained_path(tmp_path, key)


def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafeKeyError, match="leaves"):
        contained_path(root, "link/outside.txt")


def test_file_store_refuses_unsafe_keys(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    with pytest.raises(UnsafeKeyError):
        store.put_bytes("../escape", b"x")
    assert not (tmp_path.parent / "escape").exists()


def test_download_many_in_parallel(store: ObjectStore, tmp_path: Path) -> None:
    from operator_client.storage.transfer import download_many

    for i in range(40):
        store.put_bytes(f"outputs/rank-{i:05d}.csv", f"row {i}\n".encode() * (i + 1))
    items = [(f"outputs/rank-{i:05d}.csv", tmp_path / "dl" / f"{i}.csv") for i in range(40)]
    done: list[str] = []
    download_many(store, items, concurrency=8, progress=lambda key, path: done.append(key))
    assert sorted(done) == [k for k, _ in items]
    for i, (_, path) in enumerate(items):
        assert path.read_bytes() == f"row {i}\n".encode() * (i + 1)
    assert not [p for p in (tmp_path / "dl").iterdir() if p.name.startswith(".")]
    with pytest.raises(StoreError):
        download_many(store, [("outputs/missing", tmp_path / "x")])


def test_the_file_store_makes_data_durable_before_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power cut must not leave a committed name on unwritten data: the object's data is
    fsynced before the rename, and the directory after it."""
    import operator_client.storage.file as file_module

    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)  # the os module file.py calls
    monkeypatch.setattr(os, "replace", replace)
    store = file_module.FileStore(tmp_path / "s")
    store.put_bytes("checkpoints/step-1/MANIFEST.json", b"{}")
    assert events == ["fsync-file", "rename", "fsync-dir"]
    events.clear()
    assert store.create_if_absent("attempts/1.json", b"{}")
    assert events == ["fsync-file", "fsync-dir"]


def test_s3_stores_share_botocores_files_and_find_credentials_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Making a client mostly parses botocore's data files: every store of a process reads
    them through one loader, while each finds the credentials the environment names when
    it is made (botocore has no public accessor for a client's credentials)."""
    from operator_client.storage import s3

    made = []
    for key in ("first", "second"):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
        made.append(s3.S3Store("bucket", endpoint="http://127.0.0.1:9", region="us-east-1"))
    keys = [store.client._request_signer._credentials.access_key for store in made]
    assert keys == ["first", "second"]
    files: list[str] = []
    loader = s3._data_loader()
    monkeypatch.setattr(loader.file_loader, "load_file", lambda path: files.append(path))
    s3.S3Store("another", endpoint="http://127.0.0.1:9", region="us-east-1")
    assert files == []  # the third store read no file: everything was parsed already
