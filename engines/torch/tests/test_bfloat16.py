"""The GPU's dtype path on the CPU: a bfloat16 base with float32 LoRA factors trains, samples and
agrees with the float32 engine to bfloat16's precision."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from conftest import create, encoded, pass_input, sequence_datum

from tinker_engine.engine import Engine

TOKENS = [11, 22, 33, 44, 55, 66, 77, 88, 99]


def _run(engine: Engine) -> tuple[list[float], np.ndarray]:
    handle = create(engine, rank=4, seed=2)
    losses = []
    for _ in range(2):
        step = engine.dispatch("forward_backward", {"state": handle, "input": pass_input([sequence_datum(TOKENS)])})
        losses.append(step["result"]["metrics"]["loss:sum"])
        handle = engine.dispatch("optim_step", {"state": step["state"]["handle"], "params": {"learning_rate": 1e-3}})
        handle = handle["state"]["handle"]
    forward = engine.dispatch("forward", {"state": handle, "input": pass_input([sequence_datum(TOKENS)])})
    return losses, forward["result"]["loss_fn_outputs"][0]["logprobs"]


def test_bfloat16_base_trains_and_samples_like_float32(make_engine: Callable[..., Engine]) -> None:
    half = make_engine(dtype=torch.bfloat16)
    full = make_engine()
    half_losses, half_logprobs = _run(half)
    full_losses, full_logprobs = _run(full)
    assert half.pool.peft.base_model.model.model.layers[0].mlp.up_proj.base_layer.weight.dtype == torch.bfloat16
    adapter = next(iter(half.states.values()))
    assert all(p.dtype == torch.float32 for p in adapter.weights.values())
    assert half_logprobs.dtype == np.float32
    np.testing.assert_allclose(half_losses, full_losses, rtol=0.02)
    np.testing.assert_allclose(half_logprobs, full_logprobs, atol=0.1)
    sampler = half.dispatch("load_sampler", {"base_model": half.base.name, "weights": None})["sampler"]
    request = {"prompt": encoded(TOKENS), "num_samples": 2, "sampling_params": {"max_tokens": 5, "seed": 1}}
    run = half.dispatch("sample", {"sampler": sampler, "request": request, "resume": None, "max_new_tokens": None})
    assert run["finished"] and all(s["tokens"].size == 5 for s in run["sequences"])
