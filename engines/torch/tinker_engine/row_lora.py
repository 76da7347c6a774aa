"""Per-row LoRA products for a batched decode step (B1, G4).

PEFT's mixed-adapter batches (`adapter_names`) multiply each adapter's rows as one sub-batch, so a
row's product is a matrix product whose row count depends on how many rows share its adapter, and
CPU matrix kernels give different low bits for different row counts. During a decode step the model
runs with its adapters disabled (the base layers only) and a forward hook on every LoRA layer adds,
for each row with an adapter, its adapter's `B(A(x)) * scaling`: the step's rows are cut into blocks of
8 (`BLOCK_ROWS`; a step's width is whole tiles of a multiple of 8, row_tiles.py), each adapter (grouped
by rank) multiplies every block that holds one of its rows (`bmm`, products of exactly 8 rows), and
each row keeps its own adapter's product. Every product has the same shape whatever the step holds,
and a row's result depends only on its own values, so a row's bits do not depend on which adapters or
rows share the step; the arithmetic is PEFT's (`result + B(A(x)) * scaling`). The work per layer is a
few operations whatever the number of rows; an adapter costs two products per block it touches (small
beside the base layer at LoRA ranks), and an admission round puts an adapter's calls side by side so
its rows fill few blocks.

Each LoRA layer stacks its adapters' matrices once (kept while their weights are unchanged: same
tensors, same versions). The adapters are disabled by flipping the layers' flag directly (PEFT's own
context walks and re-flags the whole model on every call; no gradient is taken here).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer

BASE = "__base__"


# Rows per block: an adapter multiplies the blocks of the batch that hold its rows, each a product of
# exactly this many rows (a batch width that is not a multiple of it is one block).
BLOCK_ROWS = 8


@dataclass(frozen=True)
class _Group:
    """The rows of one rank's adapters. A pair is (adapter, block) for every block holding a row of
    that adapter: `pair_adapters` (index in `names`) and `pair_blocks`; row `rows[i]` takes its
    product from row `picks[i]` of the pairs' products laid end to end."""

    names: tuple[str, ...]
    rows: torch.Tensor
    pair_adapters: torch.Tensor
    pair_blocks: torch.Tensor
    picks: torch.Tensor
    block: int


@dataclass
class _Step:
    names: list[str]
    # The adapters of the step, each once, in order of their first row.
    adapters: tuple[str, ...]
    # The step's groups by the ranks a layer gives `adapters` (None: not adapted there); most layers
    # share one.
    groups: dict[tuple[int | None, ...], list[_Group]]


_active: _Step | None = None


@dataclass(frozen=True)
class _Stack:
    """A layer's `[A^T], [B^T], [scaling]` for some adapters, and the weights they were stacked from."""

    weights: tuple[torch.Tensor, ...]
    versions: tuple[int, ...]
    a: torch.Tensor
    b: torch.Tensor
    scaling: torch.Tensor

    def current(self) -> bool:
        return all(w._version == v for w, v in zip(self.weights, self.versions, strict=True))


def _stacked(module: LoraLayer, names: tuple[str, ...], dtype: torch.dtype) -> _Stack:
    """`names`' matrices stacked, cached on the layer while the weights hold (a slot's name is new at
    every load, adapters.py, so in-place updates are what change)."""
    cache: dict[tuple[str, ...], _Stack] = module.__dict__.setdefault("_row_lora_stacks", {})
    held = cache.get(names)
    if held is not None and held.current():
        return held
    a_weights = [module.lora_A[name].weight for name in names]
    b_weights = [module.lora_B[name].weight for name in names]
    weights = (*a_weights, *b_weights)
    a = torch.stack([w.t() for w in a_weights])
    b = torch.stack([w.t() for w in b_weights])
    scaling = torch.tensor([module.scaling[name] for name in names], dtype=dtype, device=a.device).view(-1, 1, 1)
    stack = _Stack(weights, tuple(w._version for w in weights), a, b, scaling)
    cache[names] = stack
    return stack


def _groups(ranks: dict[str, int | None], names: list[str], device: torch.device) -> list[_Group]:
    width = len(names)
    block = BLOCK_ROWS if width % BLOCK_ROWS == 0 else width
    by_rank: dict[int, tuple[list[str], list[int], dict[tuple[int, int], int], list[int]]] = {}
    for row, name in enumerate(names):
        rank = ranks.get(name)
        if rank is None:
            continue
        adapters, rows, pairs, picks = by_rank.setdefault(rank, ([], [], {}, []))
        if name not in adapters:
            adapters.append(name)
        pair = pairs.setdefault((adapters.index(name), row // block), len(pairs))
        rows.append(row)
        picks.append(pair * block + row % block)

    def index(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return [
        _Group(
            tuple(adapters),
            index(rows),
            index([adapter for adapter, _ in pairs]),
            index([at for _, at in pairs]),
            index(picks),
            block,
        )
        for adapters, rows, pairs, picks in by_rank.values()
    ]


def _ranks(module: LoraLayer, adapters: tuple[str, ...]) -> tuple[int | None, ...]:
    """The rank the layer gives each of `adapters` (None: not adapted there), kept for the last set."""
    held = module.__dict__.get("_row_lora_ranks")
    if held is not None and held[0] == adapters:
        return held[1]
    ranks = tuple(module.r[name] if name in module.lora_A else None for name in adapters)
    module.__dict__["_row_lora_ranks"] = (adapters, ranks)
    return ranks


def _hook(module: LoraLayer, inputs: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
    step = _active
    if step is None:
        return None
    ranks = _ranks(module, step.adapters)
    groups = step.groups.get(ranks)
    if groups is None:
        groups = step.groups[ranks] = _groups(dict(zip(step.adapters, ranks, strict=True)), step.names, output.device)
    if not groups:
        return output
    x = inputs[0]
    width = x.shape[0]
    flat = x.reshape(width, -1)
    output = output.clone()
    rows_out = output.view(width, -1)
    for group in groups:
        stack = _stacked(module, group.names, output.dtype)
        blocks = flat.to(stack.a.dtype).view(width // group.block, group.block, -1)
        # Each adapter times each block holding its rows (products of `block` rows, whatever the mix).
        hidden = torch.bmm(blocks.index_select(0, group.pair_blocks), stack.a.index_select(0, group.pair_adapters))
        products = torch.bmm(hidden, stack.b.index_select(0, group.pair_adapters))
        products = products * stack.scaling.index_select(0, group.pair_adapters)
        picked = products.view(-1, products.shape[-1]).index_select(0, group.picks)
        rows_out.index_add_(0, group.rows, picked.to(output.dtype))
    return output


def lora_layers(peft: PeftModel) -> list[LoraLayer]:
    """The model's LoRA layers, each given the per-row hook (idle outside `per_row_lora`) once."""
    layers = [m for m in peft.modules() if isinstance(m, LoraLayer) and isinstance(m, torch.nn.Module)]
    for layer in layers:
        if not layer.__dict__.get("_row_lora_hooked", False):
            layer.register_forward_hook(_hook)
            layer.__dict__["_row_lora_hooked"] = True
    return layers


@contextmanager
def per_row_lora(layers: list[LoraLayer], names: list[str]) -> Iterator[None]:
    """Within the block, a forward of the model of `layers` (from `lora_layers`; inputs `[rows, 1, ...]`)
    applies adapter `names[r]` to row r (`__base__`: none)."""
    global _active
    flags = [layer._disable_adapters for layer in layers]
    for layer in layers:
        layer._disable_adapters = True
    adapters = tuple(dict.fromkeys(name for name in names if name != BASE))
    _active = _Step(names, adapters, {}) if adapters else None
    try:
        yield
    finally:
        _active = None
        for layer, flag in zip(layers, flags, strict=True):
            layer._disable_adapters = flag
