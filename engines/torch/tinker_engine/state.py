"""A model state as bytes (serialize_state / deserialize_state): one safetensors file holding the
adapter's weights (`w.<name>`), Adam moments (`m1.`, `m2.`) and gradient accumulator (`g.`), float32,
with the rest in its metadata. Only this engine reads it back (docs/engine-protocol.md).
"""

from __future__ import annotations

import json

import torch
from safetensors.torch import load as load_safetensors

from .adapters import Adapter, AdapterShape
from .errors import InfrastructureError
from .tensorfile import write_safetensors

STATE_FORMAT = "tinker-engine-torch/state-1"


def serialize_state(adapter: Adapter, base_model: str) -> bytes:
    tensors: dict[str, torch.Tensor] = {}
    for prefix, group in (
        ("w.", adapter.weights),
        ("m1.", adapter.moment1),
        ("m2.", adapter.moment2),
        ("g.", adapter.grad),
    ):
        if group is None:
            continue
        for key in sorted(group):
            tensors[prefix + key] = group[key].detach().to("cpu", torch.float32).contiguous()
    metadata = {
        "format": STATE_FORMAT,
        "base_model": base_model,
        "rank": str(adapter.shape.rank),
        "alpha": repr(adapter.shape.alpha),
        "target_modules": json.dumps(list(adapter.shape.target_modules)),
        "adam_step": str(adapter.adam_step),
        "weights_version": str(adapter.weights_version),
    }
    return write_safetensors(tensors, metadata=metadata)


def deserialize_state(data: bytes) -> tuple[str, Adapter]:
    """The base model name and a (host-resident) adapter; bytes that are not a state are infrastructure."""
    try:
        length = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + length]).get("__metadata__") or {}
        if metadata.get("format") != STATE_FORMAT:
            raise InfrastructureError(f"state bytes are not {STATE_FORMAT} (got {metadata.get('format')!r})")
        tensors = load_safetensors(data)
        shape = AdapterShape(
            rank=int(metadata["rank"]),
            alpha=float(metadata["alpha"]),
            target_modules=tuple(json.loads(metadata["target_modules"])),
        )

        def group(prefix: str) -> dict[str, torch.Tensor] | None:
            found = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
            return found or None

        weights = group("w.")
        if weights is None:
            raise InfrastructureError("state bytes hold no adapter weights")
        adapter = Adapter(
            shape=shape,
            trainable=True,
            weights=weights,
            moment1=group("m1."),
            moment2=group("m2."),
            grad=group("g."),
            adam_step=int(metadata["adam_step"]),
            weights_version=int(metadata["weights_version"]),
        )
        return str(metadata["base_model"]), adapter
    except InfrastructureError:
        raise
    except Exception as error:  # noqa: BLE001 - any decoding failure means the bytes are not a state
        raise InfrastructureError(f"state bytes are unreadable: {error}") from error
