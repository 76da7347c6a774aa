"""Tinker's built-in losses through the SDK: importance_sampling, ppo, cispo and dro against their
formulas computed here from `forward`'s logprobs, and forward_backward_custom with a custom loss equal
to cross_entropy against the built-in cross_entropy on a twin model."""

import math
import os
import random

import numpy as np
from checks import ADAM, Checks, batch, logprobs_of, loss_of, max_difference, new_model
from tinker import types

checks = Checks()

# (loss_fn, loss_fn_config): ppo with its own bounds, dro with a beta, the others with the defaults.
CASES = [
    ("importance_sampling", None),
    ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}),
    ("ppo", None),
    ("cispo", None),
    ("dro", {"beta": 0.1}),
]


def f32(x: float) -> float:
    """The value as float32 holds it, which is what the SDK sends."""
    return float(np.float32(x))


def formula(loss: str, lp: float, q: float, a: float, config: dict) -> float:
    """The per-token loss as Tinker documents it, with r = exp(lp - q)."""
    r = math.exp(lp - q)
    lo, hi = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
    clipped = min(max(r, lo), hi)
    if loss == "importance_sampling":
        return -r * a
    if loss == "ppo":
        return -min(r * a, clipped * a)
    if loss == "cispo":
        return -clipped * lp * a
    beta = config.get("beta", 0.05)
    return -(lp * a - beta / 2 * (lp - q) ** 2)


@checks.check
def builtin_losses_match_their_formulas():
    """forward gives the logprobs; each loss then runs on random q (ratios 0.5 to 1.6, inside and
    outside the clip range) and advantages of both signs. No optim_step in between: every pass sees
    the same weights, so the same logprobs."""
    model = new_model(seed=3)
    data = batch()
    reported = logprobs_of(model.forward(data, "cross_entropy").result())
    rng = random.Random(5)
    observed = []
    for loss, config in CASES:
        qs = [[f32(lp - math.log(rng.uniform(0.5, 1.6))) for lp in lps] for lps in reported]
        advantages = [[f32(rng.uniform(-2, 2)) for _ in lps] for lps in reported]
        rl_data = [
            types.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": datum.loss_fn_inputs["target_tokens"],
                    "logprobs": q,
                    "advantages": a,
                },
            )
            for datum, q, a in zip(data, qs, advantages)
        ]
        result = model.forward_backward(rl_data, loss, config).result()
        elementwise = [[float(x) for x in out["elementwise_loss"].tolist()] for out in result.loss_fn_outputs]
        expected = [
            [formula(loss, lp, q, a, config or {}) for lp, q, a in zip(lps, qd, ad)]
            for lps, qd, ad in zip(reported, qs, advantages)
        ]
        lo = (config or {}).get("clip_low_threshold", 0.8)
        hi = (config or {}).get("clip_high_threshold", 1.2)
        ratios = [math.exp(lp - q) for lps, qd in zip(reported, qs) for lp, q in zip(lps, qd)]
        observed.append(
            {
                "loss_fn": loss,
                "config": config,
                "elementwise_error": max(
                    abs(x - y) / (1 + abs(y)) for ex, ey in zip(elementwise, expected) for x, y in zip(ex, ey)
                ),
                "loss_sum": loss_of(result),
                "expected_sum": sum(sum(row) for row in expected),
                "logprobs_vs_forward": max_difference(reported, logprobs_of(result)),
                "metrics": dict(result.metrics),
                "ratios_outside": sum(1 for r in ratios if r < lo or r > hi),
                "ratios_inside": sum(1 for r in ratios if lo <= r <= hi),
                "advantage_signs": [
                    sum(1 for row in advantages for a in row if a > 0),
                    sum(1 for row in advantages for a in row if a < 0),
                ],
            }
        )
    return {"cases": observed}


@checks.check
def forward_backward_custom_equals_cross_entropy():
    """Twin models (same seed): one trains with forward_backward_custom on C = -sum(logprobs * weights),
    the other with the built-in cross_entropy on the same data, signed weights included. The SDK sends
    weights = -dC/dlogprobs, so both must report the same loss and have the same logprobs after a step."""
    try:
        import torch
    except ImportError as error:
        why = os.environ.get("SDK_TORCH_MISSING") or str(error)
        return {"skipped": f"forward_backward_custom needs torch on the client, which is not importable: {why}"}
    rng = random.Random(11)
    data = []
    for text in (b"custom losses, signed weights. ", b"zero and negative too"):
        tokens = list(text)
        weights = [rng.choice([1.0, 2.0, 0.5, 0.0, -0.5, -1.0]) for _ in tokens[1:]]
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
            )
        )

    def custom_cross_entropy(data, logprobs_list):
        loss = sum(
            -(logprobs * datum.loss_fn_inputs["weights"].to_torch().to(logprobs.dtype)).sum()
            for datum, logprobs in zip(data, logprobs_list)
        )
        return loss, {"custom_loss": float(loss.detach())}

    custom_model, builtin_model = new_model(seed=21), new_model(seed=21)
    before = logprobs_of(builtin_model.forward(data, "cross_entropy").result())
    custom = custom_model.forward_backward_custom(data, custom_cross_entropy).result()
    builtin = builtin_model.forward_backward(data, "cross_entropy").result()
    custom_model.optim_step(ADAM).result()
    builtin_model.optim_step(ADAM).result()
    after_custom = logprobs_of(custom_model.forward(data, "cross_entropy").result())
    after_builtin = logprobs_of(builtin_model.forward(data, "cross_entropy").result())
    return {
        "torch": torch.__version__,
        "custom_loss_sum": loss_of(custom),
        "custom_metric": float(custom.metrics["custom_loss"]),
        "builtin_loss_sum": loss_of(builtin),
        "next_step_difference": max_difference(after_custom, after_builtin),
        "step_moved_logprobs": max_difference(before, after_builtin),
    }


if __name__ == "__main__":
    checks.run()
