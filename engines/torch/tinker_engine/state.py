"""A model state as bytes or a file (serialize_state / deserialize_state): one safetensors file holding
the adapter's weights (`w.<name>`), Adam moments (`m1.`, `m2.`) and gradient accumulator (`g.`),
float32, with the rest in its metadata. Only this engine reads it back (docs/engine-protocol.md).
Written and read one tensor at a time (tensorfile.py), so a file of any size needs no host copy of
the whole state.
"""

from __future__ import annotations

import io
import json
from typing import BinaryIO

import torch

from .adapters import Adapter, AdapterShape
from .errors import InfrastructureError
from .tensorfile import read_safetensors_from, write_safetensors_to

STATE_FORMAT = "tinker-engine-torch/state-1"


def _state_tensors(adapter: Adapter) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for prefix, group in (
        ("w.", adapter.weights),
        ("m1.", adapter.moment1),
        ("m2.", adapter.moment2),
        ("g.", adapter.grad),
    ):
        if group is None:
            continue
        for key in group:
            tensors[prefix + key] = group[key]
    return tensors


def _metadata(adapter: Adapter, base_model: str) -> dict[str, str]:
    return {
        "format": STATE_FORMAT,
        "base_model": base_model,
        "rank": str(adapter.shape.rank),
        "alpha": repr(adapter.shape.alpha),
        "target_modules": json.dumps(list(adapter.shape.target_modules)),
        "adam_step": str(adapter.adam_step),
        "weights_version": str(adapter.weights_version),
    }


def write_state(out: BinaryIO, adapter: Adapter, base_model: str) -> None:
    write_safetensors_to(out, _state_tensors(adapter), _metadata(adapter, base_model), cast=torch.float32)


def serialize_state(adapter: Adapter, base_model: str) -> bytes:
    buffer = io.BytesIO()
    write_state(buffer, adapter, base_model)
    return buffer.getvalue()


def deserialize_state(data: bytes) -> tuple[str, Adapter]:
    return read_state(io.BytesIO(data))


def read_state(stream: BinaryIO) -> tuple[str, Adapter]:
    """The base model name and a (host-resident) adapter; a stream that is not a state is infrastructure."""
    try:
        tensors, metadata = read_safetensors_from(stream)
        if metadata.get("format") != STATE_FORMAT:
            raise InfrastructureError(f"state bytes are not {STATE_FORMAT} (got {metadata.get('format')!r})")
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
