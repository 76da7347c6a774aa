"""Weights in the ecosystem's format (G5): a tar holding a PEFT adapter folder's files,

    adapter_config.json         PEFT's LoraConfig, with base_model_name_or_path
    adapter_model.safetensors   the LoRA factors under PEFT's saved names, float32
    optimizer.safetensors       `training` only: Adam moments (`exp_avg.<name>`, `exp_avg_sq.<name>`),
                                the Adam step in its metadata
    checkpoint_complete         empty, so the archive route can serve the bytes as they are

which `peft.PeftModel.from_pretrained(base, folder)` loads on the same base. Entries carry mtime 0 and
sorted keys, so the same adapter always gives the same bytes.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from typing import Any, Literal

import torch
from safetensors.torch import load as load_safetensors

from .adapters import Adapter, AdapterShape
from .errors import InfrastructureError, user_error
from .tensorfile import write_safetensors

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


def _host(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: tensors[key].detach().to("cpu", torch.float32).contiguous() for key in sorted(tensors)}


def export_weights(adapter: Adapter, base_model: str, kind: WeightsKind) -> bytes:
    files = {
        ADAPTER_CONFIG_FILE: (
            json.dumps(adapter_config(adapter.shape, base_model), indent=2, sort_keys=True) + "\n"
        ).encode(),
        ADAPTER_WEIGHTS_FILE: write_safetensors(_host(adapter.weights), metadata={"format": "pt"}),
    }
    if kind == "training":
        moments: dict[str, torch.Tensor] = {}
        for key, value in _host(adapter.weights).items():
            m1 = adapter.moment1[key] if adapter.moment1 is not None else torch.zeros_like(value)
            m2 = adapter.moment2[key] if adapter.moment2 is not None else torch.zeros_like(value)
            moments[f"exp_avg.{key}"] = m1.detach().to("cpu", torch.float32).contiguous()
            moments[f"exp_avg_sq.{key}"] = m2.detach().to("cpu", torch.float32).contiguous()
        files[OPTIMIZER_FILE] = write_safetensors(
            moments, metadata={"format": "pt", "adam_step": str(adapter.adam_step)}
        )
    files[COMPLETE_MARKER_FILE] = b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
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
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            files = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    except tarfile.TarError as error:
        raise InfrastructureError(f"weights: not a tar archive: {error}") from error
    for required in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE):
        if required not in files:
            raise InfrastructureError(f"weights: the archive lacks {required}")
    try:
        config = json.loads(files[ADAPTER_CONFIG_FILE])
        rank = int(config["r"])
        alpha = float(config.get("lora_alpha", rank))
        targets = config["target_modules"]
        targets = tuple(sorted([targets] if isinstance(targets, str) else targets))
        base_model = str(config["base_model_name_or_path"])
        weights = {k: v.to(torch.float32) for k, v in load_safetensors(files[ADAPTER_WEIGHTS_FILE]).items()}
    except (ValueError, KeyError, TypeError) as error:
        raise InfrastructureError(f"weights: unreadable adapter: {error}") from error
    moment1 = moment2 = None
    adam_step = 0
    if OPTIMIZER_FILE in files:
        raw = files[OPTIMIZER_FILE]
        tensors = load_safetensors(raw)
        moment1 = {k.removeprefix("exp_avg."): v for k, v in tensors.items() if k.startswith("exp_avg.")}
        moment2 = {k.removeprefix("exp_avg_sq."): v for k, v in tensors.items() if k.startswith("exp_avg_sq.")}
        adam_step = int(_safetensors_metadata(raw).get("adam_step", "0"))
    return ReadWeights(base_model, AdapterShape(rank, alpha, targets), weights, moment1, moment2, adam_step)


def _safetensors_metadata(raw: bytes) -> dict[str, str]:
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    return dict(header.get("__metadata__") or {})


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
