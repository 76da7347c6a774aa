"""forward and forward_backward passes (shared/backend/reference/training.ts semantics), fused: the
datums of every pass in a `run_passes` call go through the shared base as one padded batch, each row
naming its own adapter (PEFT's `adapter_names`), with one backward for the sum of the training passes'
losses. Rows use disjoint adapters, so each adapter receives exactly its own pass's gradient.

Outputs per datum: `logprobs` of target_tokens' shape and `elementwise_loss` [N] (the loss of each
position), float32. A call's gradient is added to the adapter's accumulator only once the whole call
has succeeded. A pass whose loss, outputs or gradient are not finite (an input or the weights overflow
float32) fails alone as a user error naming the value, with no effect on its state (E6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from .adapters import Adapter, AdapterPool
from .errors import UserError, user_error
from .inputs import PassDatum
from .losses import DatumTerms, PassMetrics, datum_terms
from .models import upcast

PassKind = Literal["forward", "forward_backward"]


@dataclass
class PassJob:
    kind: PassKind
    adapter: Adapter
    loss_fn: str
    config: dict[str, float]
    datums: list[PassDatum]


@dataclass
class PassResult:
    outputs: list[dict[str, np.ndarray]]
    metrics: dict[str, float]
    # Set when the pass failed alone (a non-finite result): its outputs and metrics are not answered.
    error: UserError | None = None


def run_passes(pool: AdapterPool, jobs: list[PassJob], max_batch_tokens: int) -> list[PassResult]:
    """Runs the jobs (distinct adapters), as few forwards as the residency bound and token budget allow."""
    outputs: list[list[dict[str, np.ndarray] | None]] = [[None] * len(job.datums) for job in jobs]
    metrics = [PassMetrics() for _ in jobs]
    # Each training pass's gradient, added to the accumulators only once every group has run, so a
    # failure part way leaves every state as it was.
    gradients: dict[int, dict[str, torch.Tensor]] = {}
    for group in _adapter_groups(jobs, pool.max_resident):
        gradients.update(_run_group(pool, [jobs[j] for j in group], group, outputs, metrics, max_batch_tokens))
    results: list[PassResult] = []
    for j, job in enumerate(jobs):
        result = PassResult(
            outputs=[o for o in outputs[j] if o is not None], metrics=metrics[j].metrics(job.adapter.weights_version)
        )
        result.error = _non_finite(job, result, gradients.get(j))
        if result.error is None and j in gradients:
            _accumulate(job.adapter, gradients[j])
        results.append(result)
    return results


def _non_finite(job: PassJob, result: PassResult, gradient: dict[str, torch.Tensor] | None) -> UserError | None:
    """The user error of a pass whose result or gradient is not finite, naming the first such value."""
    hint = "an input of loss_fn_inputs or loss_fn_config, or the weights, overflow float32"
    for name in sorted(result.metrics):
        value = result.metrics[name]
        if not math.isfinite(value):
            return user_error("loss_fn_inputs", f"{job.kind}: metric {name} is {value}, not finite; {hint}")
    for index, output in enumerate(result.outputs):
        for name in sorted(output):
            values = output[name]
            if not np.all(np.isfinite(values)):
                bad = values[~np.isfinite(values)].flat[0]
                return user_error(
                    "loss_fn_inputs", f"{job.kind}: loss_fn_outputs[{index}].{name} holds {bad}, not finite; {hint}"
                )
    for name in sorted(gradient or {}):
        if not bool(torch.isfinite(gradient[name]).all()):  # type: ignore[index]
            return user_error("loss_fn_inputs", f"{job.kind}: the gradient of {name} is not finite; {hint}")
    return None


def _adapter_groups(jobs: list[PassJob], bound: int) -> list[list[int]]:
    return [list(range(start, min(start + bound, len(jobs)))) for start in range(0, len(jobs), bound)]


def _micro_batches(rows: list[tuple[int, int, int]], max_batch_tokens: int) -> list[list[tuple[int, int, int]]]:
    """Consecutive rows whose padded size (rows x longest) stays within the budget (one row at least)."""
    batches: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    longest = 0
    for row in rows:
        length = row[2]
        if current and (len(current) + 1) * max(longest, length) > max_batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(row)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


def _run_group(
    pool: AdapterPool,
    jobs: list[PassJob],
    indices: list[int],
    outputs: list[list[dict[str, np.ndarray] | None]],
    metrics: list[PassMetrics],
    max_batch_tokens: int,
) -> dict[int, dict[str, torch.Tensor]]:
    """Runs one group; the gradient of each training pass, by its index in `indices`' numbering."""
    pool.activate([job.adapter for job in jobs])
    device = pool.base.device
    training = [job.adapter for job in jobs if job.kind == "forward_backward"]
    for adapter in training:
        for parameter in adapter.weights.values():
            parameter.grad = None
    # (job position in group, datum index, length), longest first so padding stays small.
    rows = [(g, d, datum.length) for g, job in enumerate(jobs) for d, datum in enumerate(job.datums)]
    rows.sort(key=lambda row: -row[2])
    try:
        for batch in _micro_batches(rows, max_batch_tokens):
            longest = batch[0][2]
            input_ids = torch.zeros((len(batch), longest), dtype=torch.long)
            mask = torch.zeros((len(batch), longest), dtype=torch.long)
            for r, (g, d, length) in enumerate(batch):
                input_ids[r, :length] = jobs[g].datums[d].tokens
                mask[r, :length] = 1
            names = [jobs[g].adapter.slot or "__base__" for g, _, _ in batch]
            needs_grad = any(jobs[g].kind == "forward_backward" for g, _, _ in batch)
            with torch.set_grad_enabled(needs_grad):
                # Rows of one length need no mask (the causal mask alone is cheaper).
                padded = any(length != longest for _, _, length in batch)
                logits = pool.forward(
                    names, input_ids=input_ids.to(device), attention_mask=mask.to(device) if padded else None
                ).logits
                total: torch.Tensor | None = None
                # One view per row through unbind: its backward stacks the rows' gradients once, where
                # indexing `logits[r]` would give every row a zero gradient of the whole batch's size.
                row_logits = logits.unbind(0)
                for r, (g, d, length) in enumerate(batch):
                    job = jobs[g]
                    datum = job.datums[d]
                    logprobs = torch.log_softmax(upcast(row_logits[r][:length]), dim=-1)
                    target_logprobs = logprobs.gather(-1, datum.targets.to(device))
                    terms = datum_terms(job.loss_fn, job.config, datum, target_logprobs)
                    _record(outputs[indices[g]], metrics[indices[g]], d, datum, target_logprobs, terms)
                    if job.kind == "forward_backward":
                        part = terms.values.sum()
                        total = part if total is None else total + part
            if total is not None and total.requires_grad:
                total.backward()
        return {indices[g]: _call_gradient(job.adapter) for g, job in enumerate(jobs) if job.kind == "forward_backward"}
    finally:
        for adapter in training:
            for parameter in adapter.weights.values():
                parameter.grad = None


def _record(
    outputs: list[dict[str, np.ndarray] | None],
    metrics: PassMetrics,
    index: int,
    datum: PassDatum,
    target_logprobs: torch.Tensor,
    terms: DatumTerms,
) -> None:
    logprobs = target_logprobs.detach().to(torch.float32).cpu().numpy().reshape(datum.target_shape)
    losses = terms.values.detach().sum(dim=-1).to(torch.float32).cpu().numpy() + np.float32(0)
    outputs[index] = {"logprobs": logprobs, "elementwise_loss": losses}
    metrics.add(terms)


def _call_gradient(adapter: Adapter) -> dict[str, torch.Tensor]:
    return {
        key: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p.detach()))
        for key, p in adapter.weights.items()
    }


def _accumulate(adapter: Adapter, gradient: dict[str, torch.Tensor]) -> None:
    """Adds a call's gradient where the adapter's tensors are now (a later group may have evicted it)."""
    device = next(iter(adapter.weights.values())).device
    if adapter.grad is None:
        adapter.grad = {key: value.to(device) for key, value in gradient.items()}
    else:
        adapter.grad = {key: adapter.grad[key] + value.to(device) for key, value in gradient.items()}
