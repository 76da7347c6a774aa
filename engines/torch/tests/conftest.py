"""Shared fixtures: the tiny model (the installed one, else written once per run) and fresh engines
on it. No test downloads weights."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tinker_engine.engine import Engine, EngineOptions
from tinker_engine.models import load_base_model
from tinker_engine.tiny_model import write_tiny_model

REPO = Path(__file__).resolve().parents[3]
INSTALLED_TINY = REPO / ".local" / "models" / "tiny-llama"

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    if (INSTALLED_TINY / "model.safetensors").is_file():
        return str(INSTALLED_TINY)
    return str(write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama"))


@pytest.fixture
def make_engine(tiny_model_dir: str) -> Callable[..., Engine]:
    """A new engine on a freshly loaded base (PEFT wraps the base model in place, so one per engine)."""

    def make(dtype: torch.dtype = torch.float32, **options: Any) -> Engine:
        engine = Engine(load_base_model(tiny_model_dir, torch.device("cpu"), dtype), EngineOptions(**options))
        engine.dispatch("hello", {"protocol_version": 1, "worker": "pytest"})
        return engine

    return make


@pytest.fixture
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine()


def encoded(tokens: list[int] | np.ndarray) -> dict[str, Any]:
    return {"chunks": [{"type": "encoded_text", "tokens": np.asarray(tokens, dtype=np.int32)}]}


def datum(tokens: list[int], targets: list[int] | np.ndarray, **inputs: np.ndarray) -> dict[str, Any]:
    return {
        "model_input": encoded(tokens),
        "loss_fn_inputs": {"target_tokens": np.asarray(targets, dtype=np.int64), **inputs},
    }


def sequence_datum(tokens: list[int], **inputs: np.ndarray) -> dict[str, Any]:
    """Next-token prediction over `tokens`: inputs tokens[:-1], targets tokens[1:]."""
    return datum(tokens[:-1], tokens[1:], **inputs)


def pass_input(data: list[dict[str, Any]], loss_fn: str = "cross_entropy", **config: float) -> dict[str, Any]:
    return {"loss_fn": loss_fn, "loss_fn_config": config, "data": data}


def create(engine: Engine, rank: int = 4, seed: int = 0, **flags: bool) -> str:
    result = engine.dispatch(
        "create_model", {"base_model": engine.base.name, "lora_config": {"rank": rank, "seed": seed, **flags}}
    )
    return result["state"]["handle"]
