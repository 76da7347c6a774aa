"""Checks of pass inputs at execution (E6): what only the engine knows (its vocabulary, its context
length, the loss inputs each loss needs). Every failure is a `UserError` naming the field, found before
anything is computed, so the state named in the request stays unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import user_error

FLOAT_LOSS_INPUTS = ("weights", "logprobs", "advantages")


@dataclass(frozen=True)
class PassDatum:
    """A datum as the losses read it: `targets` is [N, K] (K = 1 for a 1-D `target_tokens`)."""

    field: str
    tokens: torch.Tensor
    targets: torch.Tensor
    target_shape: tuple[int, ...]
    float_inputs: dict[str, torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])


def _shape_text(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _array(value: Any, field: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise user_error(field, "must be a tensor")
    return value


def model_input_tokens(model_input: Any, field: str, vocab_size: int, max_context: int) -> np.ndarray:
    """The chunks' token ids concatenated, each in [0, vocab), 1 to max_context of them."""
    if not isinstance(model_input, dict) or not isinstance(model_input.get("chunks"), list):
        raise user_error(f"{field}.chunks", "must be an array of encoded_text chunks")
    parts: list[np.ndarray] = []
    for c, chunk in enumerate(model_input["chunks"]):
        chunk_field = f"{field}.chunks[{c}]"
        if not isinstance(chunk, dict):
            raise user_error(chunk_field, "must be an encoded_text chunk")
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise user_error(
                f"{chunk_field}.type", f"only encoded_text chunks are supported, got {chunk.get('type')!r}"
            )
        tokens = _array(chunk.get("tokens"), f"{chunk_field}.tokens").reshape(-1).astype(np.int64)
        bad = np.flatnonzero((tokens < 0) | (tokens >= vocab_size))
        if bad.size:
            t = int(bad[0])
            raise user_error(
                f"{chunk_field}.tokens[{t}]", f"token id {int(tokens[t])} is outside the vocabulary [0, {vocab_size})"
            )
        parts.append(tokens)
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if tokens.size == 0:
        raise user_error(field, "holds no tokens")
    if tokens.size > max_context:
        raise user_error(field, f"holds {tokens.size} tokens, more than {max_context}")
    return tokens


def parse_pass_data(data: Any, loss_fn: str, vocab_size: int, max_context: int) -> list[PassDatum]:
    if not isinstance(data, list) or len(data) == 0:
        raise user_error("data", "must hold at least one datum")
    datums: list[PassDatum] = []
    for d, datum in enumerate(data):
        field = f"data[{d}]"
        if not isinstance(datum, dict):
            raise user_error(field, "must be a datum")
        tokens = model_input_tokens(datum.get("model_input"), f"{field}.model_input", vocab_size, max_context)
        inputs = datum.get("loss_fn_inputs") or {}
        if not isinstance(inputs, dict):
            raise user_error(f"{field}.loss_fn_inputs", "must be an object of tensors")
        targets, shape = _target_tokens(inputs, field, tokens.size, loss_fn, vocab_size)
        float_inputs: dict[str, torch.Tensor] = {}
        for name in FLOAT_LOSS_INPUTS:
            if name in inputs:
                float_inputs[name] = _float_input(inputs[name], f"{field}.loss_fn_inputs.{name}", shape)
        datums.append(
            PassDatum(
                field=field,
                tokens=torch.from_numpy(tokens.copy()),
                targets=torch.from_numpy(targets.reshape(tokens.size, -1).copy()),
                target_shape=shape,
                float_inputs=float_inputs,
            )
        )
    return datums


def _target_tokens(
    inputs: dict[str, Any], datum_field: str, positions: int, loss_fn: str, vocab_size: int
) -> tuple[np.ndarray, tuple[int, ...]]:
    field = f"{datum_field}.loss_fn_inputs.target_tokens"
    if "target_tokens" not in inputs:
        raise user_error(field, f"is required by {loss_fn}")
    tensor = _array(inputs["target_tokens"], field)
    if tensor.dtype.kind not in "iu":
        raise user_error(f"{field}.dtype", "must be int64 (token ids)")
    shape = tuple(int(d) for d in tensor.shape)
    if len(shape) not in (1, 2):
        raise user_error(f"{field}.shape", f"must be [N] or [N, K], got {_shape_text(shape)}")
    if shape[0] != positions:
        raise user_error(field, f"has {shape[0]} positions for {positions} input tokens")
    if len(shape) == 2 and shape[1] == 0:
        raise user_error(f"{field}.shape", "needs at least one target per position")
    flat = tensor.reshape(-1).astype(np.int64)
    bad = np.flatnonzero((flat < 0) | (flat >= vocab_size))
    if bad.size:
        i = int(bad[0])
        raise user_error(f"{field}.data[{i}]", f"token id {int(flat[i])} is outside the vocabulary [0, {vocab_size})")
    return flat, shape


def _float_input(value: Any, field: str, target_shape: tuple[int, ...]) -> torch.Tensor:
    tensor = _array(value, field)
    shape = tuple(int(d) for d in tensor.shape)
    if shape != target_shape:
        raise user_error(
            field, f"has shape {_shape_text(shape)}; it must match target_tokens' {_shape_text(target_shape)}"
        )
    values = tensor.astype(np.float32).reshape(target_shape[0], -1)
    bad = np.flatnonzero(~np.isfinite(values.reshape(-1)))
    if bad.size:
        i = int(bad[0])
        raise user_error(f"{field}.data[{i}]", f"must be a finite float32, got {values.reshape(-1)[i]}")
    return torch.from_numpy(values.copy())
