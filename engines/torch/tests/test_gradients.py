"""Each loss's adapter gradient through the real model against central finite differences of
`loss:sum` (L3), on a float64 copy of the tiny model so the differences are exact to ~1e-8."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from conftest import create, pass_input, sequence_datum

from tinker_engine.engine import Engine

TOKENS = [[5, 17, 99, 3, 250, 42, 7], [60, 61, 62, 63]]
# Sampler logprob offsets: ratios r = exp(lp - q) of about 0.6, 1.05, 1.5 and 0.95, so ppo and cispo
# see targets inside and outside [0.8, 1.2].
OFFSETS = [0.5, -0.05, -0.4, 0.05]


@pytest.fixture(autouse=True)
def float64_norms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama's RMSNorm computes in float32 whatever the input; in float64 here, so finite differences
    see no float32 rounding."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    def forward(self: LlamaRMSNorm, hidden: torch.Tensor) -> torch.Tensor:
        variance = hidden.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(LlamaRMSNorm, "forward", forward)


def _policy_data(engine: Engine, handle: str) -> list[dict[str, Any]]:
    forward = engine.dispatch("forward", {"state": handle, "input": pass_input([sequence_datum(t) for t in TOKENS])})
    data = []
    for d, tokens in enumerate(TOKENS):
        lp = forward["result"]["loss_fn_outputs"][d]["logprobs"]
        offsets = np.resize(np.array(OFFSETS, dtype=np.float32), lp.shape)
        advantages = np.resize(np.array([1.0, -0.5, 2.0], dtype=np.float32), lp.shape)
        data.append(sequence_datum(tokens, logprobs=(lp + offsets).astype(np.float32), advantages=advantages))
    return data


def _randomise(engine: Engine, handle: str, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    adapter = engine.states[handle]
    for key in adapter.keys():
        adapter.weights[key] = torch.randn(adapter.weights[key].shape, generator=generator, dtype=torch.float64) * 0.2


@pytest.mark.parametrize(
    ("loss_fn", "config"),
    [
        ("cross_entropy", {}),
        ("importance_sampling", {}),
        ("ppo", {}),
        ("cispo", {}),
        ("dro", {"beta": 0.3}),
    ],
)
def test_adapter_gradients_match_finite_differences(
    make_engine: Callable[..., Engine], loss_fn: str, config: dict[str, float]
) -> None:
    engine = make_engine(dtype=torch.float64)
    handle = create(engine, rank=2, seed=3)
    _randomise(engine, handle, seed=11)
    if loss_fn == "cross_entropy":
        weights = [
            np.array([1.0, -0.5, 2.0, 0.0, 1.0, 0.25], dtype=np.float32),
            np.array([0.5, 1.0, -1.0], dtype=np.float32),
        ]
        data = [sequence_datum(t, weights=w) for t, w in zip(TOKENS, weights, strict=True)]
    else:
        data = _policy_data(engine, handle)
    inputs = pass_input(data, loss_fn, **config)
    handle = engine.dispatch("forward_backward", {"state": handle, "input": inputs})["state"]["handle"]
    adapter = engine.states[handle]
    assert adapter.grad is not None
    generator = torch.Generator().manual_seed(5)
    direction = {
        key: torch.randn(adapter.weights[key].shape, generator=generator, dtype=torch.float64) for key in adapter.keys()
    }
    analytic = sum(float((adapter.grad[key] * direction[key]).sum()) for key in adapter.keys())

    probe = inputs
    if loss_fn == "cispo":
        # cispo's clip(r) is a stop-gradient: its gradient is that of -c lp with c = clip(r) A held at
        # its value here, which is cross_entropy with weights c.
        outputs = engine.dispatch("forward", {"state": handle, "input": inputs})["result"]["loss_fn_outputs"]
        frozen = []
        for item, output in zip(data, outputs, strict=True):
            ratio = np.exp(output["logprobs"].astype(np.float64) - item["loss_fn_inputs"]["logprobs"])
            weights = (np.clip(ratio, 0.8, 1.2) * item["loss_fn_inputs"]["advantages"]).astype(np.float32)
            frozen.append(
                {
                    **item,
                    "loss_fn_inputs": {"target_tokens": item["loss_fn_inputs"]["target_tokens"], "weights": weights},
                }
            )
        probe = pass_input(frozen)

    def loss_at(step: float) -> float:
        with torch.no_grad():
            for key in adapter.keys():
                adapter.weights[key].add_(direction[key] * step)
        value = engine.dispatch("forward", {"state": handle, "input": probe})["result"]["metrics"]["loss:sum"]
        with torch.no_grad():
            for key in adapter.keys():
                adapter.weights[key].sub_(direction[key] * step)
        return value

    h = 1e-5
    numeric = (loss_at(h) - loss_at(-h)) / (2 * h)
    assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-7)
    assert abs(analytic) > 1e-3


def test_pass_metrics_follow_the_reference_definitions(engine: Engine) -> None:
    handle = create(engine)
    data = _policy_data(engine, handle)
    result = engine.dispatch("forward", {"state": handle, "input": pass_input(data, "ppo")})["result"]
    metrics = result["metrics"]
    outputs = result["loss_fn_outputs"]
    ratios = [
        np.exp(o["logprobs"].astype(np.float64) - d["loss_fn_inputs"]["logprobs"])
        for o, d in zip(outputs, data, strict=True)
    ]
    elementwise = np.concatenate([o["elementwise_loss"] for o in outputs])
    targets = sum(r.size for r in ratios)
    assert metrics["loss:sum"] == pytest.approx(float(elementwise.sum()), rel=1e-5)
    assert metrics["loss:mean"] == pytest.approx(metrics["loss:sum"] / targets, rel=1e-9)
    assert metrics["weights_version:max"] == 0
    assert metrics["ratio:mean"] == pytest.approx(np.mean([r.mean() for r in ratios]), rel=1e-5)
    assert metrics["ratio:min"] == pytest.approx(min(r.min() for r in ratios), rel=1e-5)
    assert metrics["ratio:max"] == pytest.approx(max(r.max() for r in ratios), rel=1e-5)
    clip = np.mean([((r < 0.8) | (r > 1.2)).mean() for r in ratios])
    assert metrics["clip_fraction:mean"] == pytest.approx(clip)
    assert 0 < clip < 1


def test_bad_inputs_are_user_errors_that_leave_the_state_valid_and_unchanged(engine: Engine) -> None:
    from tinker_engine.errors import UserError

    handle = create(engine)
    good = pass_input([sequence_datum([1, 2, 3, 4])])
    before = engine.dispatch("serialize_state", {"state": handle})["bytes"]
    cases = [
        (pass_input([sequence_datum([1, 2, 300, 4])]), "data[0].model_input.chunks[0].tokens[2]"),
        (
            pass_input(
                [
                    {
                        "model_input": good["data"][0]["model_input"],
                        "loss_fn_inputs": {"target_tokens": np.array([1, 2], dtype=np.int64)},
                    }
                ]
            ),
            "data[0].loss_fn_inputs.target_tokens",
        ),
        (pass_input([sequence_datum([1, 2, 3, 4])], "hinge"), "loss_fn"),
        (pass_input([sequence_datum([1, 2, 3, 4])], "ppo"), "data[0].loss_fn_inputs.logprobs"),
        (
            pass_input([sequence_datum([1, 2, 3, 4])], "ppo", clip_low_threshold=1.5),
            "loss_fn_config.clip_low_threshold",
        ),
        (
            pass_input([sequence_datum([1, 2, 3, 4], weights=np.ones(2, dtype=np.float32))]),
            "data[0].loss_fn_inputs.weights",
        ),
    ]
    for bad, field in cases:
        with pytest.raises(UserError) as raised:
            engine.dispatch("forward_backward", {"state": handle, "input": bad})
        assert raised.value.field == field, raised.value.message
    with pytest.raises(UserError, match="adam_params.beta1"):
        engine.dispatch("optim_step", {"state": handle, "params": {"beta1": 1.5}})
    assert engine.dispatch("serialize_state", {"state": handle})["bytes"] == before
    assert engine.dispatch("forward_backward", {"state": handle, "input": good})["state"]["handle"] != handle


def test_a_pass_or_step_that_overflows_float32_is_a_user_error_naming_the_value(engine: Engine) -> None:
    """Hardening round 4, finding 6: one ppo step with advantages of 3e38 and an optim_step with a
    learning rate of 1e30 made the weights NaN, and every later pass and sample of the model failed as
    the infrastructure's. The step is refused as the request's error (E6), naming the values, with no
    effect on the state; a pass on weights poisoned before (a state from an older engine) fails alone as
    a user error; and the model carries on."""
    from tinker_engine.errors import UserError

    tokens = [1, 2, 3, 4]
    huge = sequence_datum(tokens, logprobs=np.zeros(3, dtype=np.float32), advantages=np.full(3, 3e38, dtype=np.float32))
    handle = engine.dispatch("forward_backward", {"state": create(engine), "input": pass_input([huge], "ppo")})[
        "state"
    ]["handle"]
    before = engine.dispatch("serialize_state", {"state": handle})["bytes"]
    with pytest.raises(UserError, match=r"not finite \(learning_rate 1e\+30, gradient norm") as raised:
        engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 1e30}})
    assert raised.value.field == "adam_params"
    assert engine.dispatch("serialize_state", {"state": handle})["bytes"] == before
    sane = engine.dispatch("forward", {"state": handle, "input": pass_input([sequence_datum(tokens)])})
    assert np.isfinite(sane["result"]["metrics"]["loss:sum"])

    poisoned = create(engine)
    with torch.no_grad():
        for weight in engine.states[poisoned].weights.values():
            weight.fill_(float("nan"))
    for op in ("forward", "forward_backward"):
        with pytest.raises(UserError, match="is nan, not finite") as raised:
            engine.dispatch(op, {"state": poisoned, "input": pass_input([sequence_datum(tokens)])})
        assert raised.value.field == "loss_fn_inputs"
    outcomes = engine.dispatch(
        "run_passes",
        {
            "items": [
                {"type": "forward_backward", "state": poisoned, "input": pass_input([sequence_datum(tokens)])},
                {"type": "forward_backward", "state": handle, "input": pass_input([sequence_datum(tokens)])},
            ]
        },
    )["outcomes"]
    assert outcomes[0]["ok"] is False and outcomes[0]["error"]["kind"] == "user"
    assert outcomes[1]["ok"] is True
    # A checkpoint of such weights is refused where it is loaded.
    exported = engine.dispatch("export_weights", {"state": poisoned, "kind": "sampler"})["weights"]
    with pytest.raises(UserError, match="not finite"):
        engine.dispatch("load_sampler", {"base_model": engine.base.name, "weights": exported})
