"""Attention over per-call KV caches for a batched decode step (B1, G4).

A decode step runs one new token for every row of a fixed-width batch (decode.py). The rows belong to
calls at different positions, so they share no cache: each call keeps its own key/value tensors, and
attention runs per group of rows whose caches have the same length, over exactly those positions (no
padding, so no masked positions that would change a row's float result). The model's other layers
see a batch of the same width whatever the composition, and a row's result does not depend on the
other rows' values at equal shapes; so a row's bits do not depend on which calls share its step.

The model keeps calling transformers' `sdpa` attention; while a step is active (`decode_step`) that
name answers with the grouped attention here, and otherwise with the library's own function, so the
prompt forward and training passes run exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import AttentionInterface


@dataclass
class RowCache:
    """One call's keys and values: per layer `[rows, kv heads, capacity, head size]`, `length` filled."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int

    @staticmethod
    def from_prompt(layers: list[tuple[torch.Tensor, torch.Tensor]], rows: int, capacity: int) -> RowCache:
        """The prompt's cache (one row per layer) copied to `rows` rows with room for `capacity` positions."""
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        length = layers[0][0].shape[2]
        for key, value in layers:
            for source, target in ((key, keys), (value, values)):
                shape = (rows, source.shape[1], capacity, source.shape[3])
                buffer = torch.empty(shape, dtype=source.dtype, device=source.device)
                buffer[:, :, :length] = source[0:1]
                target.append(buffer)
        return RowCache(keys, values, length)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


@dataclass(frozen=True)
class StepRows:
    """The step's rows: for slot s, the cache and row it extends, or None for an idle slot."""

    slots: list[tuple[RowCache, int] | None]


_active: StepRows | None = None


@contextmanager
def decode_step(rows: StepRows) -> Iterator[None]:
    """Within the block, the model's attention reads and extends the rows' caches."""
    global _active
    _active = rows
    try:
        yield
    finally:
        _active = None


def _grouped_attention(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kwargs: Any
) -> tuple[torch.Tensor, None]:
    """query `[slots, heads, 1, d]`, key and value `[slots, kv heads, 1, d]` (this step's, rotated)."""
    rows = _active
    assert rows is not None
    layer = module.layer_idx  # type: ignore[attr-defined]
    groups: dict[int, list[int]] = {}
    idle: list[int] = []
    written: list[int] = []
    targets: list[torch.Tensor] = []
    for slot, entry in enumerate(rows.slots):
        if entry is None:
            idle.append(slot)
            continue
        cache, row = entry
        targets.append(cache.keys[layer][row, :, cache.length])
        targets.append(cache.values[layer][row, :, cache.length])
        written.append(slot)
        groups.setdefault(cache.length + 1, []).append(slot)
    if written:
        # This step's keys and values into their rows' caches, as one batch of exact copies.
        new = torch.stack((key[written, :, 0], value[written, :, 0]), dim=1).flatten(0, 1)
        torch._foreach_copy_(targets, list(new.unbind(0)))
    output = torch.empty((query.shape[0], 1, query.shape[1], query.shape[3]), dtype=query.dtype, device=query.device)
    common = {"scaling": kwargs.get("scaling"), "dropout": 0.0, "is_causal": False}
    for length, slots in groups.items():
        entries = [rows.slots[s] for s in slots]
        keys = torch.cat([c.keys[layer][r : r + 1, :, :length] for c, r in entries])  # type: ignore[misc]
        values = torch.cat([c.values[layer][r : r + 1, :, :length] for c, r in entries])  # type: ignore[misc]
        out, _ = sdpa_attention_forward(module, query[slots], keys, values, None, **common)
        output[slots] = out
    if idle:
        # An idle slot attends to its own placeholder only; its output is never read.
        out, _ = sdpa_attention_forward(module, query[idle], key[idle], value[idle], None, **common)
        output[idle] = out
    return output, None


def _attention(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any
) -> Any:
    if _active is None:
        return sdpa_attention_forward(module, query, key, value, *args, **kwargs)
    return _grouped_attention(module, query, key, value, **kwargs)


def install() -> None:
    """Routes the `sdpa` attention name through `_attention` (idempotent)."""
    AttentionInterface.register("sdpa", _attention)
