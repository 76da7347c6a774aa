"""Weights in the ecosystem's format (G5): a tar holding a PEFT adapter folder's files,

    adapter_config.json         PEFT's LoraConfig, with base_model_name_or_path
    adapter_model.safetensors   the LoRA factors under PEFT's saved names, float32
    optimizer.safetensors       `training` only: Adam moments (`exp_avg.<name>`, `exp_avg_sq.<name>`),
                                the Adam step in its metadata
    checkpoint_complete         empty, so the archive route can serve the bytes as they are

which `peft.PeftModel.from_pretrained(base, folder)` loads on the same base. Entries carry mtime 0 and
sorted keys, so the same adapter always gives the same bytes. The tar is written and read one tensor
at a time (tensorfile.py), to bytes or to a file alike.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

import torch

from .adapters import Adapter, AdapterShape
from .errors import InfrastructureError, user_error
from .tensorfile import read_safetensors_from, safetensors_chunks, safetensors_size

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
COMPLETE_MARKER_FILE = "checkpoint_complete"
WeightsKind = Literal["training", "sampler"]


def adapter_config(shape: AdapterShape, base_model: str) -> dict[str, Any]:
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "revision": None,
        "r": shape.rank,
        "lora_alpha": shape.alpha,
        "lora_dropout": 0.0,
        "target_modules": list(shape.target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
        "layers_to_transform": None,
        "layers_pattern": None,
        "rank_pattern": {},
        "alpha_pattern": {},
    }


def _moments(adapter: Adapter) -> dict[str, torch.Tensor]:
    """The optimizer file's tensors, uncast: zeros where the adapter has no moment yet."""
    moments: dict[str, torch.Tensor] = {}
    for key, value in adapter.weights.items():
        m1 = adapter.moment1[key] if adapter.moment1 is not None else torch.zeros_like(value)
        m2 = adapter.moment2[key] if adapter.moment2 is not None else torch.zeros_like(value)
        moments[f"exp_avg.{key}"] = m1
        moments[f"exp_avg_sq.{key}"] = m2
    return moments


class _ChunkReader(io.RawIOBase):
    """A read-only stream over chunks made on demand (a tar member's bytes written as they are made)."""

    def __init__(self, chunks: Iterator[bytes | memoryview]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk).cast("B")
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def write_weights(out: BinaryIO, adapter: Adapter, base_model: str, kind: WeightsKind) -> None:
    """The export's tar, written to `out` one tensor at a time (tensorfile.py)."""
    config = (json.dumps(adapter_config(adapter.shape, base_model), indent=2, sort_keys=True) + "\n").encode()
    members: list[tuple[str, int, Callable[[], Iterator[bytes | memoryview]]]] = [
        (ADAPTER_CONFIG_FILE, len(config), lambda: iter([config])),
    ]
    weights_meta = {"format": "pt"}
    members.append(
        (
            ADAPTER_WEIGHTS_FILE,
            safetensors_size(adapter.weights, weights_meta, torch.float32),
            lambda: safetensors_chunks(adapter.weights, weights_meta, torch.float32),
        )
    )
    if kind == "training":
        moments = _moments(adapter)
        moments_meta = {"format": "pt", "adam_step": str(adapter.adam_step)}
        members.append(
            (
                OPTIMIZER_FILE,
                safetensors_size(moments, moments_meta, torch.float32),
                lambda: safetensors_chunks(moments, moments_meta, torch.float32),
            )
        )
    members.append((COMPLETE_MARKER_FILE, 0, lambda: iter([b""])))
    # Copied in 1 MiB chunks (tarfile's default is 16 KiB): a member may be gigabytes.
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT, copybufsize=1 << 20) as tar:
        for name, size, chunks in members:
            info = tarfile.TarInfo(name)
            info.size = size
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BufferedReader(_ChunkReader(chunks()), buffer_size=1 << 20))


def export_weights(adapter: Adapter, base_model: str, kind: WeightsKind) -> bytes:
    buffer = io.BytesIO()
    write_weights(buffer, adapter, base_model, kind)
    return buffer.getvalue()


@dataclass
class ReadWeights:
    base_model: str
    shape: AdapterShape
    weights: dict[str, torch.Tensor]
    moment1: dict[str, torch.Tensor] | None
    moment2: dict[str, torch.Tensor] | None
    adam_step: int


def read_weights(data: bytes) -> ReadWeights:
    """The adapter in an export's bytes; bytes that are not one are an `InfrastructureError`."""
    return read_weights_from(io.BytesIO(data))


def read_weights_from(stream: BinaryIO) -> ReadWeights:
    """The adapter in an export read from `stream` (a file or bytes), one tensor at a time."""
    config: Any = None
    weights: dict[str, torch.Tensor] | None = None
    optimizer: tuple[dict[str, torch.Tensor], dict[str, str]] | None = None
    try:
        with tarfile.open(fileobj=stream, mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name = member.name.removeprefix("./")
                if name not in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, OPTIMIZER_FILE):
                    continue
                data = tar.extractfile(member)
                assert data is not None  # a regular file always has data
                if name == ADAPTER_CONFIG_FILE:
                    config = json.loads(data.read())
                elif name == ADAPTER_WEIGHTS_FILE:
                    weights = read_safetensors_from(data)[0]
                else:
                    optimizer = read_safetensors_from(data)
    except tarfile.TarError as error:
        raise InfrastructureError(f"weights: not a tar archive: {error}") from error
    except ValueError as error:
        raise InfrastructureError(f"weights: unreadable adapter: {error}") from error
    for required, found in ((ADAPTER_CONFIG_FILE, config), (ADAPTER_WEIGHTS_FILE, weights)):
        if found is None:
            raise InfrastructureError(f"weights: the archive lacks {required}")
    assert weights is not None
    try:
        rank = int(config["r"])
        alpha = float(config.get("lora_alpha", rank))
        targets = config["target_modules"]
        targets = tuple(sorted([targets] if isinstance(targets, str) else targets))
        base_model = str(config["base_model_name_or_path"])
        weights = {k: v.to(torch.float32) for k, v in weights.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InfrastructureError(f"weights: unreadable adapter: {error}") from error
    moment1 = moment2 = None
    adam_step = 0
    if optimizer is not None:
        tensors, metadata = optimizer
        moment1 = {k.removeprefix("exp_avg."): v for k, v in tensors.items() if k.startswith("exp_avg.")}
        moment2 = {k.removeprefix("exp_avg_sq."): v for k, v in tensors.items() if k.startswith("exp_avg_sq.")}
        adam_step = int(metadata.get("adam_step", "0"))
    return ReadWeights(base_model, AdapterShape(rank, alpha, targets), weights, moment1, moment2, adam_step)


def check_finite(read: ReadWeights, field: str) -> None:
    """Every weight is finite: a checkpoint saved with weights that overflowed (before optim_step refused
    such steps) would fail every pass and sample of it, so it is refused as the request's error (E6)."""
    for key in sorted(read.weights):
        if not bool(torch.isfinite(read.weights[key]).all()):
            raise user_error(field, f"checkpoint tensor {key} holds values that are not finite")


def check_fits(read: ReadWeights, expected: dict[str, tuple[int, ...]], field: str) -> None:
    """The adapter's tensors are exactly the ones `expected` names, with those shapes, all finite."""
    check_finite(read, field)
    if sorted(read.weights) != sorted(expected):
        raise user_error(field, "checkpoint adapts other modules than this model")
    for key, dims in expected.items():
        if tuple(read.weights[key].shape) != dims:
            raise user_error(
                field, f"checkpoint tensor {key} has shape {list(read.weights[key].shape)}, expected {list(dims)}"
            )


def import_into(adapter: Adapter, read: ReadWeights, base_model: str, optimizer: bool) -> dict[str, Any]:
    """load_weights on a training adapter, checked first: a mismatch is a `UserError` with no effect.
    Returns the new tensors; the caller applies them."""
    if read.base_model != base_model:
        raise user_error("path", f"checkpoint is for base model {read.base_model}, not {base_model}")
    if read.shape.rank != adapter.shape.rank:
        raise user_error("path", f"checkpoint has LoRA rank {read.shape.rank}, the model has rank {adapter.shape.rank}")
    if read.shape.target_modules != adapter.shape.target_modules or read.shape.alpha != adapter.shape.alpha:
        raise user_error("path", "checkpoint adapts other modules (or another alpha) than this model")
    if optimizer and read.moment1 is None:
        raise user_error("optimizer", "a sampler checkpoint holds no optimizer state")
    if sorted(read.weights) != adapter.keys():
        raise user_error("path", "checkpoint tensors do not match this model's adapter")
    check_finite(read, "path")
    return {
        "weights": read.weights,
        "moment1": read.moment1 if optimizer else None,
        "moment2": read.moment2 if optimizer else None,
        "adam_step": read.adam_step if optimizer else 0,
    }
