"""The base model's linear layers tile by tile in a batched decode step (B1, G4).

CPU matrix kernels give different low bits for different row counts (a 1024 x 1024 product's first
row differs between 8, 32 and 256 rows on this project's torch), so a row's result must not depend on
how many rows its step multiplies. While a step is active (`tiled`), every base linear layer cuts its
input into tiles of a fixed number of rows and multiplies each tile as a product of its own (one
`bmm` over the tiles, the weight shared by all of them): a row's product depends on its tile's shape
only, whatever the number of tiles. A step can then run as many tiles as its live rows need instead
of a fixed width, so 32 calls pay for 32 rows and 128 calls run in one forward.

The rest of a decode forward is elementwise (activations, rotary embeddings) or reduces along a row
(RMS norms, softmax), which gives a row the same bits whatever the row count; attention runs per group
of rows over their own caches (row_attention.py) and LoRA per block of 8 rows (row_lora.py). A tile's
rows must be a multiple of that block.

Outside a step the layers run as `torch.nn.Linear` always does (the prompt forward, training passes).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from .row_lora import BLOCK_ROWS

# Rows per tile while a step is active; None outside a step.
_tile_rows: int | None = None


def _tiled_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    tile = _tile_rows
    if tile is None:
        return F.linear(x, self.weight, self.bias)
    features = x.shape[-1]
    tiles = x.numel() // (features * tile)
    products = torch.bmm(x.reshape(tiles, tile, features), self.weight.t().expand(tiles, -1, -1))
    if self.bias is not None:
        products = products + self.bias
    return products.view(*x.shape[:-1], self.out_features)


def base_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The model's base linear layers (not LoRA's own factors), each switched to the tiled forward once
    (plain outside `tiled`)."""
    layers = [
        module
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear and ".lora_" not in name and not name.startswith("lora_")
    ]
    for layer in layers:
        if not layer.__dict__.get("_row_tiles", False):
            layer.forward = types.MethodType(_tiled_forward, layer)  # type: ignore[method-assign]
            layer.__dict__["_row_tiles"] = True
    return layers


def check_tile_rows(tile_rows: int) -> None:
    if tile_rows < BLOCK_ROWS or tile_rows % BLOCK_ROWS != 0:
        raise ValueError(f"decode tile rows must be a positive multiple of {BLOCK_ROWS}, got {tile_rows}")


@contextmanager
def tiled(tile_rows: int) -> Iterator[None]:
    """Within the block, the layers from `base_linears` multiply their input (`[rows, ...]`, rows a
    multiple of `tile_rows`) tile by tile."""
    global _tile_rows
    _tile_rows = tile_rows
    try:
        yield
    finally:
        _tile_rows = None
