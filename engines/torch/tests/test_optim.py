"""AdamW (shared/backend/reference/training.ts semantics) against torch.optim.AdamW."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import create, pass_input, sequence_datum

from tinker_engine.engine import Engine
from tinker_engine.optim import AdamParams, adamw_step, parse_adam_params


def _steps(hyper: AdamParams, clip_with_torch: bool) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    start = {name: torch.randn(shape, generator=generator) for name, shape in (("a", (3, 4)), ("b", (5,)))}
    grads = [{name: torch.randn(p.shape, generator=generator) for name, p in start.items()} for _ in range(4)]
    ours = {name: p.clone() for name, p in start.items()}
    m = v = None
    for t, g in enumerate(grads):
        ours, m, v, _ = adamw_step(ours, g, m, v, t, hyper)
    theirs = {name: torch.nn.Parameter(p.clone()) for name, p in start.items()}
    optimizer = torch.optim.AdamW(
        list(theirs.values()),
        lr=hyper.learning_rate,
        betas=(hyper.beta1, hyper.beta2),
        eps=hyper.eps,
        weight_decay=hyper.weight_decay,
    )
    for g in grads:
        for name, p in theirs.items():
            p.grad = g[name].clone()
        if clip_with_torch:
            torch.nn.utils.clip_grad_norm_(list(theirs.values()), hyper.grad_clip_norm)
        optimizer.step()
    return ours, {name: p.detach() for name, p in theirs.items()}


@pytest.mark.parametrize(
    "hyper",
    [
        AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1),
        AdamParams(learning_rate=3e-3, beta1=0.5, beta2=0.999, eps=1e-12, weight_decay=0.0),
    ],
)
def test_adamw_matches_torch(hyper: AdamParams) -> None:
    ours, theirs = _steps(hyper, clip_with_torch=False)
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-5, atol=1e-6)


def test_grad_clip_norm_matches_torch_clipping() -> None:
    # clip_grad_norm_ scales by c / (|g| + 1e-6); the reference by c / |g|: equal to float32 tolerance.
    ours, theirs = _steps(AdamParams(learning_rate=1e-2, eps=1e-8, grad_clip_norm=0.5), clip_with_torch=True)
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=1e-5)


def test_tinker_defaults() -> None:
    assert parse_adam_params({}) == AdamParams(1e-4, 0.9, 0.95, 1e-12, 0.0, 0.0)


def test_optim_step_applies_clears_and_counts(engine: Engine) -> None:
    handle = create(engine)
    batch = pass_input([sequence_datum([3, 1, 4, 1, 5, 9, 2, 6])])
    first = engine.dispatch("forward_backward", {"state": handle, "input": batch})
    handle = first["state"]["handle"]
    step = engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 0.05, "grad_clip_norm": 1.0}})
    assert step["result"]["metrics"]["weights_version:max"] == 1
    assert step["result"]["metrics"]["grad_norm:mean"] > 1.0
    handle = step["state"]["handle"]
    adapter = engine.states[handle]
    assert adapter.grad is None and adapter.adam_step == 1
    second = engine.dispatch("forward", {"state": handle, "input": batch})["result"]["metrics"]
    assert second["weights_version:max"] == 1
    assert second["loss:sum"] < first["result"]["metrics"]["loss:sum"]
    # The handle the step consumed is gone.
    with pytest.raises(Exception, match="no state handle"):
        engine.dispatch("forward", {"state": first["state"]["handle"], "input": batch})
    assert np.isfinite(second["loss:mean"])
