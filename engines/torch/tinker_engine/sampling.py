"""Autoregressive sampling with a KV cache (G4), by the reference backend's rules
(shared/backend/reference/sampler.ts).

Token choice at generated position n of sample i: temperature 0 (or top_k 1) takes the most likely
token (lowest id on ties); otherwise candidates ordered by probability (ties: lower id first) are cut to
top_k, then to the smallest head whose temperature-scaled probability reaches top_p, and one is drawn by
inverse CDF with u = sample_uniform(seed, i, n). Reported logprobs are under the model's own
distribution (temperature 1), as `forward` gives them. A sequence stops when its generated tokens end
with a stop sequence (kept in the output; `stop`) or after max_tokens (`length`).

The SDK 0.26+ outputs read the same distributions, as the reference does: `topk_sample_logprobs` ranks
the model's own distribution at each generated position (ties: lower id first; restored positions are
recomputed during replay, so a resumed call answers what an uncut one does, P6); `prompt_alt_tokens_k`
draws k tokens with replacement at prompt position t >= 1 at the request's temperature (no top-k/top-p)
with u = alt_uniform(seed, t, j), each with its model logprob; `target_prompt_logprobs` reads the asked
ids' model logprobs at their prompt positions.

Exact resume (P6): the prompt runs once, then all samples step together, one token per step, always
as one batch of `num_samples` rows at the same position. A resumed call replays each restored prefix
token by token in that same lockstep, so every row sees the same operations on the same shapes as in an
uninterrupted call and continues with the same bits; rows that are done are fed a placeholder (a row's
result does not depend on other rows' values).

Live continuation: a call that stops at its `max_new_tokens` with rows unfinished, each at the loop's
step, leaves its loop exactly where an uninterrupted call would take its next step (the KV cache, the
step's tokens not yet fed, the rows so far: `LiveSample`). The next call of the same request whose
restored prefixes are those rows, token for token and logprob for logprob, takes that step instead of
running the prompt and replaying the prefixes: the same operations on the same tensors, so the same
bits. Any other prefix replays.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from .adapters import Adapter, AdapterPool
from .errors import InfrastructureError, user_error
from .inputs import model_input_tokens
from .models import BaseModel, upcast
from .prng import alt_uniform, sample_uniform

MAX_SAMPLES = 256
IDLE_TOKEN = 0


@dataclass(frozen=True)
class SampleParams:
    prompt: np.ndarray
    num_samples: int
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    stops: list[list[int]]
    prompt_logprobs: bool
    topk_prompt_logprobs: int
    topk_sample_logprobs: int = 0
    prompt_alt_tokens_k: int = 0
    # Dense [prompt length - 1, K] ids, -1 where none is asked; None when not asked.
    target_prompt_ids: np.ndarray | None = None


def _number(value: Any, default: float) -> Any:
    return default if value is None else value


def _check(value: Any, field: str, ok: Any, rule: str, integer: bool = False) -> Any:
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (
        not numeric
        or value != value
        or abs(value) == float("inf")
        or (integer and int(value) != value)
        or not ok(value)
    ):
        raise user_error(field, f"must be {rule}, got {value}")
    return int(value) if integer else float(value)


def parse_sample_request(request: Any, base: BaseModel) -> SampleParams:
    if not isinstance(request, dict):
        raise user_error("request", "must be an object")
    prompt = model_input_tokens(request.get("prompt"), "prompt", base.vocab_size, base.max_context)
    params = request.get("sampling_params")
    if not isinstance(params, dict):
        raise user_error("sampling_params", "must be an object")
    room = base.max_context - prompt.size
    if room < 1:
        raise user_error("prompt", f"holds {prompt.size} tokens, leaving no room in {base.max_context} context tokens")
    top_k = _check(
        _number(params.get("top_k"), -1),
        "sampling_params.top_k",
        lambda x: x >= -1,
        "-1 (no limit) or a positive integer",
        True,
    )
    return SampleParams(
        prompt=prompt,
        num_samples=_check(
            _number(request.get("num_samples"), 1),
            "num_samples",
            lambda x: 1 <= x <= MAX_SAMPLES,
            f"an integer in [1, {MAX_SAMPLES}]",
            True,
        ),
        max_tokens=_check(
            _number(params.get("max_tokens"), room),
            "sampling_params.max_tokens",
            lambda x: 1 <= x <= room,
            f"an integer in [1, {room}] (the prompt has {prompt.size} of {base.max_context} context tokens)",
            True,
        ),
        temperature=_check(
            _number(params.get("temperature"), 1), "sampling_params.temperature", lambda x: x >= 0, ">= 0"
        ),
        top_k=max(top_k, 0),
        top_p=_check(_number(params.get("top_p"), 1), "sampling_params.top_p", lambda x: 0 < x <= 1, "in (0, 1]"),
        seed=_check(_number(params.get("seed"), 0), "sampling_params.seed", lambda x: True, "an integer", True),
        stops=_parse_stops(params.get("stop"), base),
        prompt_logprobs=request.get("prompt_logprobs") is True,
        topk_prompt_logprobs=_check(
            _number(request.get("topk_prompt_logprobs"), 0),
            "topk_prompt_logprobs",
            lambda x: 0 <= x <= base.vocab_size,
            f"an integer in [0, {base.vocab_size}]",
            True,
        ),
        topk_sample_logprobs=_check(
            _number(request.get("topk_sample_logprobs"), 0),
            "topk_sample_logprobs",
            lambda x: 0 <= x <= base.vocab_size,
            f"an integer in [0, {base.vocab_size}]",
            True,
        ),
        prompt_alt_tokens_k=_check(
            _number(request.get("prompt_alt_tokens_k"), 0),
            "prompt_alt_tokens_k",
            lambda x: x >= 0,
            "an integer >= 0",
            True,
        ),
        target_prompt_ids=_parse_target_prompt_ids(request.get("target_prompt_logprobs"), prompt.size, base),
    )


def _parse_target_prompt_ids(target: Any, prompt_length: int, base: BaseModel) -> np.ndarray | None:
    """The ids tensor `[P - 1, K]` (-1: none asked) as a dense int64 array."""
    field = "target_prompt_logprobs"
    if target is None:
        return None
    if not isinstance(target, np.ndarray) or target.ndim != 2 or target.dtype.kind not in "iu":
        raise user_error(field, "must be a 2-D integer tensor of shape [prompt - 1, K]")
    if target.shape[0] != prompt_length - 1:
        raise user_error(f"{field}.shape", f"must be [{prompt_length - 1}, K] for a prompt of {prompt_length} tokens")
    ids = target.astype(np.int64)
    flat = ids.reshape(-1)
    outside = np.flatnonzero((flat != -1) & ((flat < 0) | (flat >= base.vocab_size)))
    if outside.size > 0:
        i = int(outside[0])
        raise user_error(
            f"{field}.data[{i}]", f"token id {int(flat[i])} is outside the vocabulary [0, {base.vocab_size}) (-1: none)"
        )
    return ids


def _parse_stops(stop: Any, base: BaseModel) -> list[list[int]]:
    """Stop token ids, token sequences, or strings (encoded by the base model's tokenizer)."""
    field = "sampling_params.stop"
    if stop is None:
        return []
    items = stop if isinstance(stop, list) else [stop]

    def token(value: Any, at: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise user_error(at, f"token ids must be integers, got {value}")
        if not 0 <= value < base.vocab_size:
            raise user_error(at, f"token id {value} is outside the vocabulary [0, {base.vocab_size})")
        return value

    stops: list[list[int]] = []
    for i, item in enumerate(items):
        at = f"{field}[{i}]"
        if isinstance(item, str):
            if not item:
                raise user_error(at, "stop strings must not be empty")
            encoded = list(base.tokenizer.encode(item, add_special_tokens=False))
            if not encoded:
                raise user_error(at, f"the tokenizer encodes {item!r} as no tokens")
            stops.append([token(t, at) for t in encoded])
        elif isinstance(item, int) and not isinstance(item, bool):
            stops.append([token(item, at)])
        elif isinstance(item, list) and item:
            stops.append([token(t, f"{at}[{j}]") for j, t in enumerate(item)])
        else:
            raise user_error(at, "must be a token id, a non-empty token sequence or a string")
    return stops


def choose_token(logprobs: torch.Tensor, params: SampleParams, u: float) -> int:
    """The reference's rule on one row of float64 logprobs."""
    return choose_tokens(logprobs.unsqueeze(0), params, [u])[0]


def choose_tokens(rows: torch.Tensor, params: SampleParams, uniforms: list[float]) -> list[int]:
    """The reference's rule on each row of `rows` (float64 logprobs `[R, V]`) with draw `uniforms[r]`.

    Every operation is elementwise or along a row (max, sort, cumulative sum, counts), so a row's token
    is the same whichever rows it is chosen with: the batched decoder (decode.py) and the one-call
    loop below choose through this one function.
    """
    if params.temperature == 0 or params.top_k == 1:
        return [int(t) for t in torch.argmax(rows, dim=-1).tolist()]
    vocab = rows.shape[1]
    ranked = params.top_k > 0 or params.top_p < 1
    if ranked:
        values, order = torch.sort(rows, dim=-1, descending=True, stable=True)
    else:
        values, order = rows, None
    count = min(params.top_k, vocab) if params.top_k > 0 else vocab
    weights = torch.exp((values[:, :count] - rows.max(dim=-1, keepdim=True).values) / params.temperature)
    cumulative = torch.cumsum(weights, dim=-1)
    counts = torch.full((rows.shape[0],), count, dtype=torch.long, device=rows.device)
    if params.top_p < 1:
        threshold = params.top_p * cumulative[:, count - 1 : count]
        counts = torch.clamp((cumulative < threshold).sum(dim=-1) + 1, max=count)
    total = cumulative.gather(1, (counts - 1).unsqueeze(1))
    draws = torch.tensor(uniforms, dtype=rows.dtype, device=rows.device).unsqueeze(1)
    kept = torch.arange(count, device=rows.device).unsqueeze(0) < counts.unsqueeze(1)
    choices = torch.minimum(((cumulative <= draws * total) & kept).sum(dim=-1), counts - 1)
    if order is not None:
        choices = order.gather(1, choices.unsqueeze(1)).squeeze(1)
    return [int(t) for t in choices.tolist()]


def topk_rows_of(rows: torch.Tensor, k: int) -> list[list[list[Any]]]:
    """Per row, the k most likely [token, logprob] pairs (ties: lower id first), logprobs as float32."""
    values, order = torch.sort(rows, dim=-1, descending=True, stable=True)
    values = values[:, :k].cpu().numpy().astype(np.float32)
    order = order[:, :k].cpu().numpy()
    return [[[int(order[r, j]), float(values[r, j])] for j in range(order.shape[1])] for r in range(order.shape[0])]


def _prompt_extras(prompt_lp: torch.Tensor, params: SampleParams) -> dict[str, Any]:
    """`prompt_alt_tokens` and `target_prompt_logprobs`: row t - 1 reads prompt position t >= 1."""
    extras: dict[str, Any] = {}
    positions = prompt_lp.shape[0] - 1
    k = params.prompt_alt_tokens_k
    if k > 0:
        alt_tokens: list[list[int]] = []
        alt_logprobs: list[list[float]] = []
        for t in range(1, positions + 1):
            row = prompt_lp[t - 1].to(torch.float64)
            draws = _alt_draws(row, params.temperature, [alt_uniform(params.seed, t, j) for j in range(k)])
            picked = row[torch.tensor(draws, dtype=torch.long, device=row.device)].cpu().numpy().astype(np.float32)
            alt_tokens.append(draws)
            alt_logprobs.append([float(x) for x in picked])
        extras["prompt_alt_tokens"] = {"tokens": alt_tokens, "logprobs": alt_logprobs}
    ids = params.target_prompt_ids
    if ids is not None:
        asked = torch.from_numpy(np.maximum(ids, 0)).to(prompt_lp.device)
        picked = prompt_lp[:-1].gather(-1, asked).cpu().numpy().astype(np.float32)
        extras["target_prompt_logprobs"] = [
            [None if ids[r, c] == -1 else float(picked[r, c]) for c in range(ids.shape[1])] for r in range(ids.shape[0])
        ]
    return extras


def _alt_draws(row: torch.Tensor, temperature: float, uniforms: list[float]) -> list[int]:
    """choose_token's rule with no top-k/top-p, one CDF for all of a position's draws."""
    if temperature == 0:
        return [int(torch.argmax(row).item())] * len(uniforms)
    cumulative = torch.cumsum(torch.exp((row - row.max()) / temperature), 0)
    total = float(cumulative[-1].item())
    targets = torch.tensor([u * total for u in uniforms], dtype=cumulative.dtype, device=cumulative.device)
    # Elements <= target, as choose_token counts them.
    counts = torch.searchsorted(cumulative, targets, right=True).clamp(max=row.shape[0] - 1)
    return [int(c) for c in counts.tolist()]


def ends_with_stop(tokens: list[int], stops: list[list[int]]) -> bool:
    return any(len(stop) <= len(tokens) and tokens[len(tokens) - len(stop) :] == stop for stop in stops)


def restored_prefix(resume: Any, index: int, params: SampleParams, vocab: int) -> tuple[list[int], list[float]]:
    if resume is None:
        return [], []
    if not isinstance(resume, dict):
        raise InfrastructureError(f"resume[{index}]: must be {{tokens, logprobs}} or null")
    tokens = np.asarray(resume.get("tokens")).reshape(-1).astype(np.int64)
    logprobs = np.asarray(resume.get("logprobs")).reshape(-1).astype(np.float32)
    fits = (
        tokens.size == logprobs.size
        and tokens.size <= params.max_tokens
        and bool(np.all((tokens >= 0) & (tokens < vocab)))
        and not bool(np.any(np.isnan(logprobs)))
    )
    if not fits:
        raise InfrastructureError(f"resume[{index}]: restored prefix does not fit this request")
    return [int(t) for t in tokens], [float(x) for x in logprobs]


def same_request(a: SampleParams, b: SampleParams) -> bool:
    """Field by field, arrays by shape and values (the request a live state was generated for)."""
    for field in fields(SampleParams):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


@dataclass
class LiveSample:
    """A call's generation where its `max_new_tokens` stopped it, ready for its next step."""

    params: SampleParams
    # The KV cache through the step before `pending`, one row per sample (the only tensors held).
    cache: Any
    # The tokens the last step chose (placeholders for done rows), not yet run through the model.
    pending: list[int]
    step: int
    tokens: list[list[int]]
    logprobs: list[list[float]]
    stop_reason: list[str | None]
    topk_rows: list[list[list[Any]]]
    # prompt_logprobs, topk_prompt_logprobs, prompt_alt_tokens, target_prompt_logprobs as answered.
    prompt_outputs: dict[str, Any]

    def holds(self, prefixes: list[tuple[list[int], list[float]]]) -> bool:
        """Whether `prefixes` are exactly this state's rows (logprobs compared as float32 bits)."""

        def bits(values: list[float]) -> bytes:
            return np.asarray(values, dtype=np.float32).tobytes()

        return all(
            tokens == self.tokens[i] and bits(logprobs) == bits(self.logprobs[i])
            for i, (tokens, logprobs) in enumerate(prefixes)
        )


@torch.no_grad()
def sample(
    pool: AdapterPool,
    adapter: Adapter | None,
    params: SampleParams,
    resume: list[Any] | None,
    max_new_tokens: int | None,
    live: LiveSample | None = None,
) -> tuple[dict[str, Any], LiveSample | None]:
    """The SampleRun, and the call's live state when `max_new_tokens` stopped it with rows unfinished.
    `live` (the previous slice's state of this request, on this sampler) is continued when the
    restored prefixes are its rows, else ignored."""
    base = pool.base
    if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 0):
        raise InfrastructureError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens}")
    budget = max_new_tokens if max_new_tokens is not None else params.max_tokens
    if resume is not None and (not isinstance(resume, list) or len(resume) > params.num_samples):
        raise InfrastructureError("resume: must be a list of at most num_samples prefixes")
    if adapter is not None:
        pool.activate([adapter])
    name = adapter.slot if adapter is not None else "__base__"
    assert name is not None
    device = base.device
    n = params.num_samples
    prefixes = [
        restored_prefix(resume[i] if resume is not None and i < len(resume) else None, i, params, base.vocab_size)
        for i in range(n)
    ]
    if live is not None and not live.holds(prefixes):
        live = None

    if live is not None:
        cache = live.cache
        pending: list[int] | None = live.pending
        step = live.step
        result = dict(live.prompt_outputs)
        first_rows: torch.Tensor | None = None
        tokens, logprobs, stop_reason, topk_rows = live.tokens, live.logprobs, live.stop_reason, live.topk_rows
        replay = [0] * n
    else:
        prompt = torch.from_numpy(params.prompt.copy()).to(device).unsqueeze(0)
        out = pool.forward([name], input_ids=prompt, use_cache=True)
        prompt_lp = torch.log_softmax(upcast(out.logits[0]), dim=-1)
        cache = out.past_key_values
        pending = None
        step = 0
        result = prompt_outputs(prompt, prompt_lp, params)
        first_rows = prompt_lp[-1].to(torch.float64).unsqueeze(0).expand(n, -1)
        tokens = [list(p[0]) for p in prefixes]
        logprobs = [list(p[1]) for p in prefixes]
        replay = [len(p[0]) for p in prefixes]
        stop_reason = [None] * n
        topk_rows = [[] for _ in range(n)]

    def finish(i: int) -> str | None:
        if ends_with_stop(tokens[i], params.stops):
            return "stop"
        return "length" if len(tokens[i]) >= params.max_tokens else None

    if live is None:
        stop_reason = [finish(i) if tokens[i] else None for i in range(n)]
    generated = [0] * n

    def active(i: int) -> bool:
        return stop_reason[i] is None and generated[i] < budget

    topk = params.topk_sample_logprobs

    def more(step: int) -> bool:
        # Restored tokens are replayed to continue them, and also to recompute their top-k rows.
        return any(active(i) or (topk > 0 and step < replay[i]) for i in range(n))

    names = [name] * n

    def forward(fed: list[int]) -> torch.Tensor:
        nonlocal cache
        ids = torch.tensor(fed, dtype=torch.long, device=device).unsqueeze(1)
        out = pool.forward(names, input_ids=ids, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        return torch.log_softmax(upcast(out.logits[:, -1]), dim=-1).to(torch.float64)

    if more(step):
        if first_rows is not None:
            cache.batch_repeat_interleave(n)
            rows = first_rows
        else:
            assert pending is not None
            rows = forward(pending)
        while True:
            fed: list[int] = []
            ranked = topk_rows_of(rows, topk) if topk > 0 else None
            for i in range(n):
                if step < replay[i]:
                    if ranked is not None:
                        topk_rows[i].append(ranked[i])
                    fed.append(tokens[i][step])
                elif active(i):
                    if ranked is not None:
                        topk_rows[i].append(ranked[i])
                    token = choose_token(rows[i], params, sample_uniform(params.seed, i, step))
                    tokens[i].append(token)
                    logprobs[i].append(float(np.float32(rows[i, token].item())))
                    generated[i] += 1
                    stop_reason[i] = finish(i)
                    fed.append(token)
                else:
                    fed.append(IDLE_TOKEN)
            step += 1
            if not more(step):
                pending = fed
                break
            rows = forward(fed)

    finished = all(reason is not None for reason in stop_reason)
    sequences = [
        {
            "stop_reason": stop_reason[i],
            "tokens": np.asarray(tokens[i], dtype=np.int32),
            "logprobs": np.asarray(logprobs[i], dtype=np.float32),
            **({"topk_logprobs": list(topk_rows[i])} if topk > 0 else {}),
        }
        for i in range(n)
    ]
    # Kept only when every unfinished row stands where an uninterrupted call's would: at `step` tokens.
    # Rows restored at different lengths (a cut whose save of some sequence failed) step together too,
    # and a row whose budget ran out while another still replayed was fed placeholders meanwhile.
    aligned = all(stop_reason[i] is not None or len(tokens[i]) == step for i in range(n))
    kept = (
        LiveSample(params, cache, pending, step, tokens, logprobs, stop_reason, topk_rows, dict(result))
        if not finished and pending is not None and aligned
        else None
    )
    return {"finished": finished, **result, "sequences": sequences}, kept


def prompt_outputs(prompt: torch.Tensor, prompt_lp: torch.Tensor, params: SampleParams) -> dict[str, Any]:
    """What a SampleRun answers about the prompt: its logprobs, top-k rows, alternatives, targets."""
    result: dict[str, Any] = {}
    if params.prompt_logprobs:
        ids = prompt[0, 1:]
        picked = prompt_lp[:-1].gather(-1, ids.unsqueeze(-1)).squeeze(-1).cpu().numpy().astype(np.float32)
        result["prompt_logprobs"] = [None, *(float(x) for x in picked)]
    if params.topk_prompt_logprobs > 0:
        k = params.topk_prompt_logprobs
        values, order = torch.sort(prompt_lp[:-1], dim=-1, descending=True, stable=True)
        values = values[:, :k].cpu().numpy().astype(np.float32)
        order = order[:, :k].cpu().numpy()
        result["topk_prompt_logprobs"] = [None] + [
            [[int(order[t, j]), float(values[t, j])] for j in range(k)] for t in range(values.shape[0])
        ]
    result.update(_prompt_extras(prompt_lp, params))
    return result
