"""A checkpoint as kctl-train writes it: Lightning's checkpoint dict saved with
torch.distributed.checkpoint (DCP), every rank writing a share (docs/STORAGE.md).

The dict is split into its tensors, each under a dotted name, and a *skeleton*: the dict
with every tensor replaced by a reference to its name, pickled whole, so every key keeps
its type (an optimizer's state is keyed by integers; DCP's own flattening would turn them
into strings and the optimizer would silently drop its state) and every other value its
exact form. Tensors are assigned to writers by size, largest first, to the writer with
the fewest bytes so far: the same plan on every rank, from shapes alone. Rank 0 also
writes the skeleton; each rank writes its own RNG states. Reading needs no process group:
any rank reads every share, whatever the world size that wrote them.

A checkpoint directory written before (one `model.ckpt`) is read as it always was.

Every byte of a checkpoint was written by a pod, so reading one never runs what it holds
(docs/LOCAL_PODS.md): DCP's `.metadata` is unpickled with only DCP's own types allowed,
the skeleton and the RNG states with torch's weights-only unpickler (plain containers,
numbers, strings, tensors, and the few types safe_types() names).
"""

from __future__ import annotations

import io
import pickle
import random
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PosixPath
from typing import Any

import torch

SKELETON = "kctl_train/skeleton"
RNG_PREFIX = "kctl_train/rng/"
METADATA = ".metadata"
# Where a rebuilt checkpoint carries every rank's RNG states: {rank: states}.
RNG_KEY = "kctl_train_rng"


@dataclass(frozen=True)
class TensorRef:
    """Where a tensor was in the checkpoint dict: its name among the saved tensors."""

    name: str


def flatten(checkpoint: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """The skeleton of `checkpoint` and its tensors by name (dicts, lists and tuples are
    walked; every other value stays in the skeleton as it is)."""
    tensors: dict[str, torch.Tensor] = {}

    def name_for(path: tuple[Any, ...]) -> str:
        base = ".".join(str(p) for p in path) or "tensor"
        name, n = base, 1
        while name in tensors:
            n += 1
            name = f"{base}#{n}"
        return name

    def walk(value: Any, path: tuple[Any, ...]) -> Any:
        if isinstance(value, torch.Tensor):
            name = name_for(path)
            tensors[name] = value
            return TensorRef(name)
        if isinstance(value, dict):
            return type(value)((k, walk(v, (*path, k))) for k, v in value.items())
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return type(value)(walk(v, (*path, i)) for i, v in enumerate(value))
        return value

    return walk(checkpoint, ()), tensors


def rebuild(skeleton: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """The checkpoint dict again: every reference replaced by its tensor."""
    if isinstance(skeleton, TensorRef):
        return tensors[skeleton.name]
    if isinstance(skeleton, dict):
        return type(skeleton)((k, rebuild(v, tensors)) for k, v in skeleton.items())
    if isinstance(skeleton, (list, tuple)) and type(skeleton) in (list, tuple):
        return type(skeleton)(rebuild(v, tensors) for v in skeleton)
    return skeleton


def assign(sizes: Mapping[str, int], writers: int) -> dict[str, int]:
    """Which writer (0..writers-1) saves each tensor: largest first, each to the writer with
    the fewest bytes so far (ties: the lower rank). Deterministic: every rank computes the
    same plan from the same shapes, with no message."""
    loads = [0] * writers
    plan = {}
    for name, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        writer = min(range(writers), key=lambda w: (loads[w], w))
        plan[name] = writer
        loads[writer] += size
    return plan


class UnsafeCheckpoint(ValueError):
    """A checkpoint asks to run code (or to build a type a checkpoint never holds) when
    read: it was not written by kctl-train, and nothing of it is loaded."""


_DCP_METADATA = "torch.distributed.checkpoint.metadata"


def _dcp_global(module: str, name: str) -> Any:
    """The one global a DCP `.metadata` may name (what torch's FileSystemWriter pickles:
    its metadata dataclasses and enum, the storage info, torch.Size, dtypes and layouts,
    a path), else UnsafeCheckpoint."""
    import torch.distributed.checkpoint.filesystem as dcp_fs
    import torch.distributed.checkpoint.metadata as dcp_metadata

    if module == _DCP_METADATA:
        found = getattr(dcp_metadata, name, None)
        if isinstance(found, type) and found.__module__ == _DCP_METADATA:
            return found
    allowed = {
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): dcp_fs._StorageInfo,
        ("torch", "Size"): torch.Size,
        ("torch.serialization", "_get_layout"): torch.serialization._get_layout,
        ("pathlib", "PosixPath"): PosixPath,
    }
    if (module, name) in allowed:
        return allowed[(module, name)]
    if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
        return getattr(torch, name)
    if (module, name) == ("builtins", "getattr"):
        return _enum_member  # how newer Pythons pickle an enum member: getattr(cls, name)
    raise UnsafeCheckpoint(f"its .metadata names {module}.{name}, which DCP never writes")


def _enum_member(cls: Any, name: Any) -> Any:
    """getattr as a DCP `.metadata` may use it: a member of one of DCP's own enums, and
    nothing else (a getattr of any other object could reach any code)."""
    import enum

    import torch.distributed.checkpoint.metadata as dcp_metadata

    known = isinstance(cls, type) and getattr(dcp_metadata, cls.__name__, None) is cls
    if known and issubclass(cls, enum.Enum) and isinstance(name, str) and name in cls.__members__:
        return cls[name]
    raise UnsafeCheckpoint(f"its .metadata asks for getattr({cls!r}, {name!r})")


class _DcpUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _dcp_global(module, name)


def _reader(path: Path) -> Any:
    """DCP's file reader, reading `.metadata` with the restricted unpickler."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class SafeReader(dcp.FileSystemReader):  # type: ignore[misc]
        def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
            with open(path / METADATA, "rb") as handle:
                metadata = _DcpUnpickler(handle).load()
            if not isinstance(metadata, Metadata):
                raise UnsafeCheckpoint(f"{path / METADATA} holds no DCP metadata")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(path))


def safe_types() -> list[Any]:
    """The types beside plain data a Lightning checkpoint dict may hold: kctl-train's own
    tensor references and Lightning's hyperparameter dict."""
    from lightning.fabric.utilities.data import AttributeDict

    return [TensorRef, AttributeDict, PosixPath]


def safe_load(source: Any) -> Any:
    """torch.load with the weights-only unpickler and safe_types(); UnsafeCheckpoint for
    anything else (a pickle that would run code)."""
    try:
        with torch.serialization.safe_globals(safe_types()):
            return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpoint(
            f"refused to load it: {str(exc).splitlines()[0]} (a checkpoint kctl-train writes "
            "holds plain data, tensors and Lightning's hyperparameters only)"
        ) from None


def skeleton_bytes(skeleton: Any) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(skeleton, buffer)
    buffer.seek(0)
    return buffer


def rng_states() -> io.BytesIO:
    """This process's RNG states (Python, torch CPU and CUDA, NumPy when installed), as
    plain data and tensors only, so reading them back needs no code from the file."""
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy

        name, keys, position, has_gauss, gauss = numpy.random.get_state()
        states["numpy"] = (name, [int(k) for k in keys], position, has_gauss, gauss)
    except ImportError:
        pass
    buffer = io.BytesIO()
    torch.save(states, buffer)
    return buffer


def restore_rng(states: Mapping[str, Any]) -> None:
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        import numpy

        name, keys, position, has_gauss, gauss = states["numpy"]
        numpy.random.set_state(
            (name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, gauss)
        )


def rng_item(rank: int) -> str:
    return f"{RNG_PREFIX}rank-{rank:05d}"


def load(path: Path) -> dict[str, Any]:
    """The Lightning checkpoint dict at `path`: a DCP directory (with `.metadata`), or a
    file `torch.save` wrote. Tensors are on the CPU. UnsafeCheckpoint for one that would
    run code when read."""
    if not (path / METADATA).is_file():
        loaded: dict[str, Any] = safe_load(path)
        return loaded
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = _reader(path)
    target: dict[str, Any] = {}
    for name, meta in reader.read_metadata().state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata):
            target[name] = torch.empty(meta.size, dtype=meta.properties.dtype)
        else:
            target[name] = io.BytesIO()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*single process.*")  # no_dist, as meant
        dcp.load(target, storage_reader=reader, no_dist=True)
    tensors = {k: v for k, v in target.items() if isinstance(v, torch.Tensor)}
    target[SKELETON].seek(0)
    checkpoint: dict[str, Any] = rebuild(safe_load(target[SKELETON]), tensors)
    checkpoint[RNG_KEY] = {
        int(name.rsplit("-", 1)[1]): safe_load(io.BytesIO(item.getvalue()))
        for name, item in target.items()
        if name.startswith(RNG_PREFIX)
    }
    return checkpoint


def consolidate(directory: Path, target: Path) -> Path:
    """One file any Lightning can load (`Trainer.fit(ckpt_path=...)`, `torch.load`) from
    a sharded checkpoint directory."""
    checkpoint = load(directory)
    checkpoint.pop(RNG_KEY, None)
    tmp = target.with_name(f".{target.name}.partial")
    torch.save(checkpoint, tmp)
    tmp.replace(target)
    return target
