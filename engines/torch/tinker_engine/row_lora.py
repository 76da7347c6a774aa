"""Per-row LoRA products for a batched decode step (B1, G4).

PEFT's mixed-adapter batches (`adapter_names`) multiply each adapter's rows as one sub-batch, so a
row's product is a matrix product whose row count depends on how many rows share its adapter, and
CPU matrix kernels give different low bits for different row counts. During a decode step the model
runs with its adapters disabled (the base layers only) and a forward hook on every LoRA layer adds,
for each row with an adapter, `B(A(x)) * scaling` as its own product in a batched matmul (`bmm`, one
matrix product per row, the same kernel whatever the batch), grouped by rank. So a row's result does
not depend on which adapters share the step; the arithmetic is PEFT's (`result + B(A(x)) * scaling`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer

BASE = "__base__"


def _lora_hook(names: list[str]) -> Any:
    def hook(module: LoraLayer, inputs: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
        x = inputs[0]
        groups: dict[int, list[int]] = {}
        for row, name in enumerate(names):
            if name != BASE and name in module.lora_A:
                groups.setdefault(module.r[name], []).append(row)
        if not groups:
            return output
        output = output.clone()
        for rows in groups.values():
            a = torch.stack([module.lora_A[names[r]].weight.t() for r in rows])
            b = torch.stack([module.lora_B[names[r]].weight.t() for r in rows])
            scaling = torch.tensor(
                [module.scaling[names[r]] for r in rows], dtype=output.dtype, device=output.device
            ).view(-1, 1, 1)
            sub = x[rows].to(a.dtype)
            delta = torch.bmm(torch.bmm(sub, a), b) * scaling
            output[rows] = output[rows] + delta.to(output.dtype)
        return output

    return hook


@contextmanager
def per_row_lora(peft: PeftModel, names: list[str]) -> Iterator[None]:
    """Within the block, a forward of `peft` (inputs `[rows, 1, ...]`) applies adapter `names[r]` to
    row r (`__base__`: none)."""
    hook = _lora_hook(names)
    with ExitStack() as stack:
        stack.enter_context(peft.disable_adapter())
        adapted = any(name != BASE for name in names)
        for module in peft.modules() if adapted else ():
            if isinstance(module, LoraLayer) and isinstance(module, torch.nn.Module):
                stack.callback(module.register_forward_hook(hook).remove)
        yield
