"""The five losses with the reference backend's formulas, config keys and metrics
(shared/backend/reference/losses.ts, shared/backend/loss-config.ts; docs/design.md#l1).

With lp the learner's logprob of a target, q the `logprobs` input (the sampler's), A the `advantages`
input and r = exp(lp - q), the per-target losses (summed, never normalised) and their slopes d/d lp are
    cross_entropy        -w lp                                  slope -w
    importance_sampling  -r A                                   slope -r A
    ppo                  -min(r A, clip(r, lo, hi) A)           slope -r A, or 0 where the clipped term wins
    cispo                -sg(clip(r, lo, hi)) lp A              slope -clip(r, lo, hi) A
    dro                  -(lp A - beta/2 (lp - q)^2)            slope -A + beta (lp - q)
Each loss returns per-target values whose autograd slope is exactly the reference's, computed in
float64 from the model's float32 logprobs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .errors import user_error
from .inputs import PassDatum


@dataclass(frozen=True)
class ConfigKey:
    default: float
    rule: str
    allows: Callable[[float], bool]


_CLIP_BOUNDS = {
    "clip_low_threshold": ConfigKey(0.8, "a ratio bound in [0, 1]", lambda x: 0 <= x <= 1),
    "clip_high_threshold": ConfigKey(1.2, "a ratio bound >= 1", lambda x: x >= 1),
}

LOSS_FN_CONFIG: dict[str, dict[str, ConfigKey]] = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": _CLIP_BOUNDS,
    "cispo": _CLIP_BOUNDS,
    "dro": {"beta": ConfigKey(0.05, "a finite number >= 0", lambda x: x >= 0)},
}
POLICY_LOSSES = ("importance_sampling", "ppo", "cispo", "dro")


@dataclass
class DatumTerms:
    """Per target ([N, K]): loss values (with the reference's slope), weights in `loss:mean`, and for
    policy-gradient losses the ratio r and (ppo, cispo) whether r lies outside [lo, hi]."""

    values: torch.Tensor
    weights: torch.Tensor
    ratio: torch.Tensor | None = None
    clipped: torch.Tensor | None = None


def _is_number(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )


def resolve_loss(name: object, config: object) -> tuple[str, dict[str, float]]:
    """The loss name and its config with defaults filled in; a `UserError` naming the bad key."""
    if not isinstance(name, str) or name not in LOSS_FN_CONFIG:
        raise user_error("loss_fn", f"unknown loss function {name!r}; supported: {', '.join(LOSS_FN_CONFIG)}")
    keys = LOSS_FN_CONFIG[name]
    given = config if isinstance(config, dict) else {}
    for key, value in given.items():
        if key not in keys:
            expected = f"allowed: {', '.join(keys)}" if keys else "it takes no config keys"
            raise user_error(f"loss_fn_config.{key}", f"not a config key of loss_fn {name} ({expected})")
        if not _is_number(value) or not keys[key].allows(float(value)):
            raise user_error(f"loss_fn_config.{key}", f"must be {keys[key].rule}, got {value}")
    return name, {key: float(given.get(key, spec.default)) for key, spec in keys.items()}


def check_loss_inputs(name: str, datums: list[PassDatum]) -> None:
    """Policy-gradient losses need `logprobs` and `advantages` on every datum."""
    if name not in POLICY_LOSSES:
        return
    for datum in datums:
        for input_name in ("logprobs", "advantages"):
            if input_name not in datum.float_inputs:
                field = f"{datum.field}.loss_fn_inputs.{input_name}"
                raise user_error(field, f"is required by loss_fn {name}")


def datum_terms(name: str, config: dict[str, float], datum: PassDatum, logprobs: torch.Tensor) -> DatumTerms:
    """The loss terms of one datum, `logprobs` [N, K] being the learner's target logprobs."""
    lp = logprobs.to(torch.float64)
    device = lp.device

    def read(input_name: str) -> torch.Tensor:
        return datum.float_inputs[input_name].to(device=device, dtype=torch.float64)

    if name == "cross_entropy":
        weights = read("weights") if "weights" in datum.float_inputs else torch.ones_like(lp)
        return DatumTerms(values=-weights * lp, weights=weights)

    q = read("logprobs")
    advantages = read("advantages")
    ones = torch.ones_like(lp)
    ratio = torch.exp(lp - q)
    if name == "importance_sampling":
        return DatumTerms(values=-ratio * advantages, weights=ones, ratio=ratio.detach())
    if name == "dro":
        beta = config["beta"]
        drift = lp - q
        return DatumTerms(values=-(lp * advantages - (beta / 2) * drift * drift), weights=ones, ratio=ratio.detach())

    lo, hi = config["clip_low_threshold"], config["clip_high_threshold"]
    clipped_ratio = ratio.clamp(lo, hi)
    outside = ((ratio < lo) | (ratio > hi)).detach()
    if name == "ppo":
        unclipped_term = ratio * advantages
        clipped_term = clipped_ratio.detach() * advantages
        # Where the clipped term is strictly smaller it wins and is constant in lp (slope 0); elsewhere
        # the unclipped term is the loss (inside the range the two coincide), slope -r A.
        clipped_wins = (clipped_term < unclipped_term).detach()
        values = torch.where(clipped_wins, -clipped_term, -unclipped_term)
        return DatumTerms(values=values, weights=ones, ratio=ratio.detach(), clipped=outside)
    if name == "cispo":
        # The clipped ratio is a stop-gradient weight: lp's own factor carries the whole slope.
        coefficient = clipped_ratio.detach() * advantages
        return DatumTerms(values=-coefficient * lp, weights=ones, ratio=ratio.detach(), clipped=outside)
    raise user_error("loss_fn", f"unknown loss function {name!r}")


class PassMetrics:
    """`loss:sum`, `loss:mean`, and the ratio metrics of a pass, as training.ts's RatioStats."""

    def __init__(self) -> None:
        self.loss_sum = 0.0
        self.weight_sum = 0.0
        self.ratio_means: list[float] = []
        self.clip_means: list[float] = []
        self.ratio_min = float("inf")
        self.ratio_max = float("-inf")

    def add(self, terms: DatumTerms) -> None:
        self.loss_sum += float(terms.values.detach().sum().item())
        self.weight_sum += float(terms.weights.sum().item())
        if terms.ratio is not None and terms.ratio.numel() > 0:
            self.ratio_means.append(float(terms.ratio.mean().item()))
            self.ratio_min = min(self.ratio_min, float(terms.ratio.min().item()))
            self.ratio_max = max(self.ratio_max, float(terms.ratio.max().item()))
            if terms.clipped is not None:
                self.clip_means.append(float(terms.clipped.to(torch.float64).mean().item()))

    def metrics(self, weights_version: int) -> dict[str, float]:
        out = {
            "loss:mean": 0.0 if self.weight_sum == 0 else self.loss_sum / self.weight_sum,
            "loss:sum": self.loss_sum + 0.0,
            "weights_version:max": float(weights_version),
        }
        if self.ratio_means:
            out["ratio:mean"] = sum(self.ratio_means) / len(self.ratio_means)
            out["ratio:min"] = self.ratio_min
            out["ratio:max"] = self.ratio_max
        if self.clip_means:
            out["clip_fraction:mean"] = sum(self.clip_means) / len(self.clip_means)
        return out
