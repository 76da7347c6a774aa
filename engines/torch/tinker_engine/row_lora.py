"""Per-row LoRA products for a batched decode step (B1, G4).

PEFT's mixed-adapter batches (`adapter_names`) multiply each adapter's rows as one sub-batch, so a
row's product is a matrix product whose row count depends on how many rows share its adapter, and
CPU matrix kernels give different low bits for different row counts. During a decode step the model
runs with its adapters disabled (the base layers only) and a forward hook on every LoRA layer adds,
for each row with an adapter, `B(A(x)) * scaling` as its own product in a batched matmul (`bmm`, one
matrix product per row, the same kernel whatever the batch), grouped by rank. So a row's result does
not depend on which adapters share the step; the arithmetic is PEFT's (`result + B(A(x)) * scaling`).

Per step the Python work is per adapter, not per row: each LoRA layer stacks its adapters' matrices
once (kept while their weights are unchanged: same storage, same version) and gathers them per row
with one index. The adapters are disabled by flipping the layers' flag directly (PEFT's own context
walks and re-flags the whole model on every call; no gradient is taken here).
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


@dataclass(frozen=True)
class _Group:
    """Rows of one rank: their indices in the batch and, per row, its adapter's index in `names`."""

    names: tuple[str, ...]
    rows: torch.Tensor
    which: torch.Tensor


@dataclass
class _Step:
    names: list[str]
    # The adapters of the step, each once, in order of their first row.
    adapters: tuple[str, ...]
    # The step's groups by the ranks a layer gives `adapters` (None: not adapted there); most layers
    # share one.
    groups: dict[tuple[int | None, ...], list[_Group]]


_active: _Step | None = None


def _weights_key(module: LoraLayer, names: tuple[str, ...]) -> tuple[Any, ...]:
    # A slot's name is new at every load (adapters.py), so storage and in-place updates are what change.
    key: list[Any] = []
    for name in names:
        a, b = module.lora_A[name].weight, module.lora_B[name].weight
        key.append((a._version, b._version, module.scaling[name]))
    return tuple(key)


def _stacked(module: LoraLayer, names: tuple[str, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """`[A^T], [B^T], [scaling]` of `names`, stacked (cached on the layer while the weights hold)."""
    cache: dict[tuple[str, ...], tuple[tuple[Any, ...], tuple[torch.Tensor, ...]]]
    cache = module.__dict__.setdefault("_row_lora_stacks", {})
    key = _weights_key(module, names)
    held = cache.get(names)
    if held is not None and held[0] == key:
        return held[1]
    a = torch.stack([module.lora_A[name].weight.t() for name in names])
    b = torch.stack([module.lora_B[name].weight.t() for name in names])
    scaling = torch.tensor([module.scaling[name] for name in names], dtype=dtype, device=a.device).view(-1, 1, 1)
    cache[names] = (key, (a, b, scaling))
    return a, b, scaling


def _groups(ranks: dict[str, int | None], names: list[str], device: torch.device) -> list[_Group]:
    by_rank: dict[int, tuple[list[str], list[int], list[int]]] = {}
    for row, name in enumerate(names):
        rank = ranks.get(name)
        if rank is None:
            continue
        adapters, rows, which = by_rank.setdefault(rank, ([], [], []))
        if name not in adapters:
            adapters.append(name)
        rows.append(row)
        which.append(adapters.index(name))
    return [
        _Group(
            tuple(adapters),
            torch.tensor(rows, dtype=torch.long, device=device),
            torch.tensor(which, dtype=torch.long, device=device),
        )
        for adapters, rows, which in by_rank.values()
    ]


def _hook(module: LoraLayer, inputs: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
    step = _active
    if step is None:
        return None
    ranks = tuple(module.r[name] if name in module.lora_A else None for name in step.adapters)
    groups = step.groups.get(ranks)
    if groups is None:
        groups = step.groups[ranks] = _groups(dict(zip(step.adapters, ranks, strict=True)), step.names, output.device)
    if not groups:
        return output
    x = inputs[0]
    output = output.clone()
    for group in groups:
        a_all, b_all, scaling_all = _stacked(module, group.names, output.dtype)
        a, b, scaling = a_all[group.which], b_all[group.which], scaling_all[group.which]
        sub = x[group.rows].to(a.dtype)
        delta = torch.bmm(torch.bmm(sub, a), b) * scaling
        output[group.rows] = output[group.rows] + delta.to(output.dtype)
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
