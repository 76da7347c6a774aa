"""Tiled base linear layers (row_tiles.py): a row's product depends only on its tile, whatever the number
of tiles; outside a step the layers are plain `torch.nn.Linear`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tinker_engine.row_tiles import base_linears, check_tile_rows, tiled


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    # Large enough that a plain product's rows differ in the low bits between 8, 24 and 56 rows on this
    # project's torch (smaller layers happen to agree, and would pass without tiles).
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Linear(512, 256, bias=False))


def test_a_rows_product_is_the_same_bits_in_one_tile_or_among_many() -> None:
    model = _model()
    layers = base_linears(model)
    assert len(layers) == 2
    rows = torch.randn(8 * 7, 1, 256)
    with torch.no_grad(), tiled(8):
        alone = model(rows[16:24])
        among_three = model(rows[:24])[16:24]
        among_seven = model(rows)[16:24]
    assert torch.equal(alone, among_three)
    assert torch.equal(alone, among_seven)


def test_outside_a_step_the_layers_compute_what_linear_computes() -> None:
    model = _model()
    base_linears(model)
    rows = torch.randn(5, 256, requires_grad=True)
    first, second = model[0], model[1]
    expected = F.linear(F.linear(rows, first.weight, first.bias), second.weight)
    got = model(rows)
    assert torch.equal(got, expected)
    got.sum().backward()
    assert rows.grad is not None


def test_lora_factors_are_not_tiled() -> None:
    class Adapted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base_layer = torch.nn.Linear(8, 8)
            self.lora_A = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 2)})

    adapted = Adapted()
    assert base_linears(adapted) == [adapted.base_layer]


@pytest.mark.parametrize("rows", [0, 4, 12, -8])
def test_tile_rows_must_be_a_positive_multiple_of_the_lora_block(rows: int) -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        check_tile_rows(rows)
