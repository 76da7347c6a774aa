"""Random models of a chosen size (tiny_model.py): the dimensions asked for, the same bytes for the same
seed, and an engine that loads and trains them like the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import create, pass_input, sequence_datum

from tinker_engine.engine import Engine, EngineOptions
from tinker_engine.models import load_base_model
from tinker_engine.tiny_model import ModelSize, main, parameter_count, write_tiny_model

SMALL = ModelSize(hidden=128, layers=1, heads=4, kv_heads=2)


def test_a_sized_model_has_the_asked_dimensions_and_is_deterministic(tmp_path: Path) -> None:
    first = write_tiny_model(tmp_path / "a", size=SMALL, seed=3)
    second = write_tiny_model(tmp_path / "b", size=SMALL, seed=3)
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
    config = json.loads((first / "config.json").read_text())
    assert config["hidden_size"] == 128 and config["num_hidden_layers"] == 1
    assert config["num_attention_heads"] == 4 and config["num_key_value_heads"] == 2
    # 8/3 x 128 = 341.3, rounded up to a multiple of 32.
    assert config["intermediate_size"] == 352 and config["vocab_size"] == 256
    # Embeddings and head (2 x 256 x 128), attention (q, o 128x128; k, v 128x64), MLP (3 x 128 x 352), norms.
    assert parameter_count(first) == 2 * 256 * 128 + 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352 + 3 * 128
    other = write_tiny_model(tmp_path / "c", size=SMALL, seed=4)
    assert (other / "model.safetensors").read_bytes() != (first / "model.safetensors").read_bytes()


def test_the_command_line_writes_a_sized_model_only_when_asked(tmp_path: Path) -> None:
    assert main([str(tmp_path / "sized"), "--hidden", "128", "--layers", "1"]) == 0
    assert json.loads((tmp_path / "sized" / "config.json").read_text())["num_attention_heads"] == 2
    with pytest.raises(ValueError, match="multiple"):
        write_tiny_model(tmp_path / "bad", size=ModelSize(hidden=100, layers=1, heads=3))


def test_an_engine_trains_a_sized_model(tmp_path: Path) -> None:
    folder = write_tiny_model(tmp_path / "model", size=SMALL)
    engine = Engine(load_base_model(str(folder), torch.device("cpu"), torch.float32), EngineOptions())
    engine.dispatch("hello", {"protocol_version": 1, "worker": "pytest"})
    handle = create(engine, rank=8)
    step = {"state": handle, "input": pass_input([sequence_datum([5, 6, 7, 8, 9])])}
    handle = engine.dispatch("forward_backward", step)["state"]["handle"]
    state = engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 0.01}})["state"]
    assert state["weights_version"] == 1
