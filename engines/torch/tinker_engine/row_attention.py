"""Attention over per-row KV caches for a batched decode step (B1, G4).

A decode step runs one new token for every row of its batch (decode.py: whole tiles of rows). The rows belong to
calls at different positions, so they share no cache: every live row owns a slot of the decoder's KV
arena (per layer `[slots, kv heads, positions, head size]`), and attention runs per group of rows whose
caches have the same length, over exactly those positions (no padding, so no masked positions that
would change a row's float result). The model's other layers multiply tile by tile (row_tiles.py) or
work elementwise and along rows, and a row's result does not depend on the other rows' values at equal
shapes; so a row's bits do not depend on which calls share its step.

The step's rows are described once per forward (`StepRows.of`: index tensors of the writes and of each
length group), so each layer's work is a few index operations whatever the number of rows.

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


class KvArena:
    """Every live row's keys and values, per layer `[slots, kv heads, positions, head size]`.

    A call holds `rows` slots from admission to its end. The arena grows (a copy) when an admitted call
    needs more slots or positions than it has, and is dropped when no call holds a slot.
    """

    def __init__(self, layers: int, heads: int, head_size: int, dtype: torch.dtype, device: torch.device) -> None:
        self.layers = layers
        self.heads = heads
        self.head_size = head_size
        self.dtype = dtype
        self.device = device
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.slots = 0
        self.positions = 0
        self._free: list[int] = []

    @property
    def held(self) -> int:
        return self.slots - len(self._free)

    def reserve(self, slots: int, positions: int) -> None:
        """Grows the arena (a copy) to at least `slots` slots of `positions` positions."""
        if slots > self.slots or positions > self.positions:
            self._grow(max(slots, self.slots), max(positions, self.positions))

    def take(self, rows: int) -> list[int]:
        """`rows` free slots, the lowest first (`reserve` made room)."""
        if len(self._free) < rows:
            raise ValueError(f"the KV arena has {len(self._free)} free slots, {rows} asked")
        taken, self._free = self._free[:rows], self._free[rows:]
        return taken

    def give_back(self, slots: list[int]) -> None:
        # Kept in order, so calls admitted together take consecutive slots (attention reads them as a view).
        self._free = sorted(self._free + slots)
        if self.held == 0:
            self.keys, self.values, self._free = [], [], []
            self.slots = self.positions = 0

    def fill(self, slots: list[int], prompt: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The prompt's keys and values (one row per layer) into `slots`."""
        index = torch.tensor(slots, dtype=torch.long, device=self.device)
        length = prompt[0][0].shape[2]
        for layer, (key, value) in enumerate(prompt):
            for target, source in ((self.keys[layer], key), (self.values[layer], value)):
                target[:, :, :length].index_copy_(0, index, source[0:1].expand(len(slots), -1, -1, -1))

    def _grow(self, slots: int, positions: int) -> None:
        shape = (slots, self.heads, positions, self.head_size)
        for tensors in (self.keys, self.values):
            old = list(tensors)
            tensors.clear()
            for layer in range(self.layers):
                grown = torch.empty(shape, dtype=self.dtype, device=self.device)
                if old:
                    held = old[layer]
                    grown[: held.shape[0], :, : held.shape[2]] = held
                tensors.append(grown)
        self._free.extend(range(self.slots, slots))
        self.slots, self.positions = slots, positions


def _span(values: list[int]) -> tuple[int, int] | None:
    """`(first, last + 1)` when `values` are consecutive ascending integers, else None."""
    if values and values[-1] - values[0] == len(values) - 1 and values == list(range(values[0], values[-1] + 1)):
        return values[0], values[-1] + 1
    return None


@dataclass(frozen=True)
class _Group:
    """Rows whose caches reach the same length this step: their batch positions and arena slots (each
    also as a range when consecutive, read as a view instead of gathered: the same values, and
    attention gives the same bits on a view as on a gathered copy)."""

    batch: torch.Tensor
    batch_span: tuple[int, int] | None
    slots: torch.Tensor
    slot_span: tuple[int, int] | None
    length: int


@dataclass(frozen=True)
class StepRows:
    """One forward's rows: where this step's keys go, and the attention groups."""

    arena: KvArena
    # Live rows: batch position, arena slot and the position written this step.
    written: torch.Tensor
    written_slots: torch.Tensor
    written_positions: torch.Tensor
    groups: tuple[_Group, ...]

    @staticmethod
    def of(arena: KvArena, slots: list[tuple[int, int] | None]) -> StepRows:
        """`slots[b]`: the arena slot and cache length of batch row b, or None for an idle row."""
        device = arena.device
        batch = [b for b, entry in enumerate(slots) if entry is not None]
        live = [entry for entry in slots if entry is not None]
        by_length: dict[int, tuple[list[int], list[int]]] = {}
        for b, (slot, length) in zip(batch, live, strict=True):
            rows, arena_slots = by_length.setdefault(length + 1, ([], []))
            rows.append(b)
            arena_slots.append(slot)

        def index(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=device)

        return StepRows(
            arena,
            index(batch),
            index([slot for slot, _ in live]),
            index([length for _, length in live]),
            tuple(
                _Group(index(rows), _span(rows), index(s), _span(s), length) for length, (rows, s) in by_length.items()
            ),
        )


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
    """query `[batch, heads, 1, d]`, key and value `[batch, kv heads, 1, d]` (this step's, rotated)."""
    rows = _active
    assert rows is not None
    layer = module.layer_idx  # type: ignore[attr-defined]
    keys, values = rows.arena.keys[layer], rows.arena.values[layer]
    # This step's keys and values into their rows' slots (exact copies).
    keys[rows.written_slots, :, rows.written_positions] = key[rows.written, :, 0]
    values[rows.written_slots, :, rows.written_positions] = value[rows.written, :, 0]
    # Idle rows' outputs are never read; zeros keep them finite.
    output = torch.zeros((query.shape[0], 1, query.shape[1], query.shape[3]), dtype=query.dtype, device=query.device)
    common = {"scaling": kwargs.get("scaling"), "dropout": 0.0, "is_causal": False}
    for group in rows.groups:
        if group.slot_span is not None:
            first, end = group.slot_span
            cached_keys = keys[first:end, :, : group.length]
            cached_values = values[first:end, :, : group.length]
        else:
            cached_keys = keys[:, :, : group.length].index_select(0, group.slots)
            cached_values = values[:, :, : group.length].index_select(0, group.slots)
        if group.batch_span is not None:
            first, end = group.batch_span
            out, _ = sdpa_attention_forward(module, query[first:end], cached_keys, cached_values, None, **common)
            output[first:end] = out
        else:
            out, _ = sdpa_attention_forward(
                module, query.index_select(0, group.batch), cached_keys, cached_values, None, **common
            )
            output.index_copy_(0, group.batch, out)
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
