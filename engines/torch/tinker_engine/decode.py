"""Batched decode (B1): every live sample call advances in shared decode steps (protocol version 2).

Calls join and leave at step boundaries. A call is admitted when its worst-case KV cache (its rows x
(prompt + max_tokens) positions) fits the KV budget beside the admitted calls; the rest wait in arrival
order (a call larger than the whole budget runs when nothing else is admitted). On admission its prompt
runs alone (the same forward as sampling.py's), its rows' first tokens are chosen, and its rows join the
next step. A step feeds each live row its last token: rows are packed into forwards of exactly
`decode_rows` rows (idle slots hold a placeholder), each row at its own position, with its call's
adapter (a per-row LoRA product, row_lora.py), attending over its own cache (row_attention.py).

Exactness (G4, P6): a forward's shape is the same whatever calls share it, a row's result does not
depend on the other rows' values at equal shapes, and attention reads exactly the row's positions; so
a call's tokens and logprobs are the same alone, in any batch, and when stopped and resumed (the
restored prefix is replayed token by token through the same steps, as sampling.py does). Token choice,
stops, logprobs and the SDK 0.26+ outputs follow sampling.py's rules.

A call stopped by `stop` (a cut, a cancel) answers at the next step boundary with its sequences so
far and `finished: false`, as a slice's end does; the worker resumes it from those tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .adapters import Adapter, AdapterPool
from .errors import EngineError, InfrastructureError
from .models import upcast
from .prng import sample_uniforms
from .row_attention import RowCache, StepRows, decode_step, install
from .row_lora import BASE, lora_layers, per_row_lora
from .sampling import (
    IDLE_TOKEN,
    SampleParams,
    choose_token,
    ends_with_stop,
    prompt_outputs,
    restored_prefix,
    topk_rows_of,
)


@dataclass
class Call:
    """One sample call from its request to its answer."""

    key: Any
    params: SampleParams
    adapter: Adapter | None
    # Restored prefixes, per row (empty: start).
    prefixes: list[tuple[list[int], list[float]]]
    budget: int
    reserved: int
    cache: RowCache | None = None
    result: dict[str, Any] = field(default_factory=dict)
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    stop_reason: list[str | None] = field(default_factory=list)
    topk: list[list[list[Any]]] = field(default_factory=list)
    replay: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    # The tokens chosen at the last boundary, to be fed at the next step.
    fed: list[int] = field(default_factory=list)
    step: int = 0
    stop_requested: bool = False

    @property
    def rows(self) -> int:
        return self.params.num_samples

    def active(self, row: int) -> bool:
        return self.stop_reason[row] is None and self.generated[row] < self.budget

    def more(self) -> bool:
        k = self.params.topk_sample_logprobs
        return any(self.active(i) or (k > 0 and self.step < self.replay[i]) for i in range(self.rows))

    def draws(self) -> list[tuple[int, int, int]]:
        """The keys of the draws `choose` takes at this step (rows that choose a token), in row order."""
        seed = self.params.seed
        return [(seed, i, self.step) for i in range(self.rows) if self.step >= self.replay[i] and self.active(i)]

    def choose(self, rows: torch.Tensor, uniforms: list[float] | None = None) -> None:
        """The step's token per row from `rows` (float64 logprobs), as sampling.py's loop does;
        `uniforms`: the draws of `draws()`, computed together with other calls' (else computed here)."""
        params = self.params
        draws = iter(uniforms if uniforms is not None else sample_uniforms(self.draws()))
        k = params.topk_sample_logprobs
        ranked = topk_rows_of(rows, k) if k > 0 else None
        fed: list[int] = []
        for i in range(self.rows):
            if self.step < self.replay[i]:
                if ranked is not None:
                    self.topk[i].append(ranked[i])
                fed.append(self.tokens[i][self.step])
            elif self.active(i):
                if ranked is not None:
                    self.topk[i].append(ranked[i])
                token = choose_token(rows[i], params, next(draws))
                self.tokens[i].append(token)
                self.logprobs[i].append(float(np.float32(rows[i, token].item())))
                self.generated[i] += 1
                self.stop_reason[i] = self.finish(i)
                fed.append(token)
            else:
                fed.append(IDLE_TOKEN)
        self.step += 1
        self.fed = fed

    def finish(self, row: int) -> str | None:
        if ends_with_stop(self.tokens[row], self.params.stops):
            return "stop"
        return "length" if len(self.tokens[row]) >= self.params.max_tokens else None

    def answer(self) -> dict[str, Any]:
        k = self.params.topk_sample_logprobs
        sequences = [
            {
                "stop_reason": self.stop_reason[i],
                "tokens": np.asarray(self.tokens[i], dtype=np.int32),
                "logprobs": np.asarray(self.logprobs[i], dtype=np.float32),
                **({"topk_logprobs": list(self.topk[i])} if k > 0 else {}),
            }
            for i in range(self.rows)
        ]
        finished = all(reason is not None for reason in self.stop_reason)
        return {"finished": finished, **self.result, "sequences": sequences}


def kv_bytes_per_position(pool: AdapterPool) -> int:
    """Bytes one row's cache grows by per position: keys and values of every layer."""
    config = pool.base.model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    itemsize = torch.empty((), dtype=pool.base.dtype).element_size()
    return 2 * config.num_hidden_layers * heads * head_size * itemsize


Answer = tuple[Any, dict[str, Any] | EngineError]


class Decoder:
    """The engine's live sample calls and their shared decode steps."""

    def __init__(self, pool: AdapterPool, decode_rows: int, kv_budget_bytes: int) -> None:
        install()
        self.pool = pool
        self.decode_rows = max(1, decode_rows)
        self.kv_budget_bytes = kv_budget_bytes
        self.per_position = kv_bytes_per_position(pool)
        self.waiting: deque[Call] = deque()
        self.live: list[Call] = []
        self.reserved = 0
        # The model's LoRA layers, listed again after an adapter load (one may adapt new modules).
        self._layers: list[Any] = []
        self._layers_at = -1

    @property
    def busy(self) -> bool:
        return bool(self.live or self.waiting)

    def submit(
        self,
        key: Any,
        params: SampleParams,
        adapter: Adapter | None,
        resume: list[Any] | None,
        max_new_tokens: int | None,
    ) -> None:
        """Queues a call (checked here: a bad `resume` raises before anything is queued)."""
        if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 0):
            raise InfrastructureError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens}")
        if resume is not None and (not isinstance(resume, list) or len(resume) > params.num_samples):
            raise InfrastructureError("resume: must be a list of at most num_samples prefixes")
        vocab = self.pool.base.vocab_size
        prefixes = [
            restored_prefix(resume[i] if resume is not None and i < len(resume) else None, i, params, vocab)
            for i in range(params.num_samples)
        ]
        positions = params.prompt.size + params.max_tokens
        reserved = params.num_samples * positions * self.per_position
        budget = max_new_tokens if max_new_tokens is not None else params.max_tokens
        self.waiting.append(Call(key, params, adapter, prefixes, budget, reserved))

    def stop(self, key: Any) -> bool:
        """Marks a call to answer at the next step boundary; whether it was held."""
        for call in (*self.live, *self.waiting):
            if call.key == key:
                call.stop_requested = True
                return True
        return False

    def drop_adapter(self, adapter: Adapter) -> list[Answer]:
        """Answers the calls of a released sampler at once (their adapter is leaving the pool)."""
        gone = [c for c in (*self.live, *self.waiting) if c.adapter is adapter]
        error = InfrastructureError("the sampler was released while this call ran")
        return [self._leave(call, error) for call in gone]

    def step(self) -> list[Answer]:
        """Admits what fits, answers stopped and finished calls, and runs one decode step."""
        answers: list[Answer] = []
        for call in [c for c in (*self.live, *self.waiting) if c.stop_requested]:
            answers.append(self._leave(call, None))
        answers.extend(self._admit())
        for call in [c for c in self.live if not c.more()]:
            answers.append(self._leave(call, None))
        if not self.live:
            return answers
        try:
            self._decode()
        except Exception as error:  # noqa: BLE001 - a failed step fails its calls, not the engine
            failure = error if isinstance(error, EngineError) else InfrastructureError(f"decode step: {error}")
            answers.extend(self._leave(call, failure) for call in list(self.live))
        return answers

    # ---- admission

    def _admit(self) -> list[Answer]:
        answers: list[Answer] = []
        # Prompt forwards of this admission by (adapter, prompt): calls of one prompt on one sampler
        # (an RL group's) share it; the same forward on the same inputs, so the same bits.
        prompts: dict[tuple[int, bytes], tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]] = {}
        while self.waiting:
            call = self.waiting[0]
            if self.live and self.reserved + call.reserved > self.kv_budget_bytes:
                break
            self.waiting.popleft()
            self.reserved += call.reserved
            self.live.append(call)
            try:
                self._start(call, prompts)
            except Exception as error:  # noqa: BLE001 - the call's failure, answered like any other
                failure = error if isinstance(error, EngineError) else InfrastructureError(f"sample: {error}")
                answers.append(self._leave(call, failure))
        return answers

    @torch.no_grad()
    def _start(
        self,
        call: Call,
        prompts: dict[tuple[int, bytes], tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]],
    ) -> None:
        """Runs the prompt (or takes this admission's run of it), chooses the first tokens (or replays),
        and leaves the call ready to step."""
        params = call.params
        prompt = torch.from_numpy(params.prompt.copy()).to(self.pool.base.device).unsqueeze(0)
        key = (id(call.adapter), params.prompt.astype(np.int64).tobytes())
        if key not in prompts:
            if call.adapter is not None:
                self.pool.activate([call.adapter])
            out = self.pool.forward([self._name(call)], input_ids=prompt, use_cache=True)
            prompt_lp = torch.log_softmax(upcast(out.logits[0]), dim=-1)
            prompts[key] = ([(layer.keys, layer.values) for layer in out.past_key_values.layers], prompt_lp)
        layers, prompt_lp = prompts[key]
        call.cache = RowCache.from_prompt(layers, call.rows, params.prompt.size + params.max_tokens)
        call.result = prompt_outputs(prompt, prompt_lp, params)
        call.tokens = [list(p[0]) for p in call.prefixes]
        call.logprobs = [list(p[1]) for p in call.prefixes]
        call.replay = [len(p[0]) for p in call.prefixes]
        call.topk = [[] for _ in range(call.rows)]
        call.generated = [0] * call.rows
        call.stop_reason = [call.finish(i) if call.tokens[i] else None for i in range(call.rows)]
        if call.more():
            call.choose(prompt_lp[-1].to(torch.float64).unsqueeze(0).expand(call.rows, -1))

    # ---- steps

    def _name(self, call: Call) -> str:
        return call.adapter.slot if call.adapter is not None and call.adapter.slot is not None else BASE

    @torch.no_grad()
    def _decode(self) -> None:
        adapters = {id(c.adapter): c.adapter for c in self.live if c.adapter is not None}
        self.pool.activate(list(adapters.values()))
        slots = [(call, row) for call in self.live if call.more() for row in range(call.rows)]
        logprobs: dict[int, list[torch.Tensor]] = {id(call): [] for call in self.live}
        width = self.decode_rows
        for start in range(0, len(slots), width):
            chunk = slots[start : start + width]
            rows = self._forward(chunk, width)
            for (call, _), row in zip(chunk, rows, strict=False):
                logprobs[id(call)].append(row)
        stepping = [call for call in self.live if call.more()]
        # Every call's keyed draws of this step in one vectorised computation (prng.py).
        keys = [call.draws() for call in stepping]
        uniforms = sample_uniforms([key for call_keys in keys for key in call_keys])
        taken = 0
        for call, call_keys in zip(stepping, keys, strict=True):
            assert call.cache is not None
            call.cache.length += 1
            call.choose(torch.stack(logprobs[id(call)]), uniforms[taken : taken + len(call_keys)])
            taken += len(call_keys)

    def _forward(self, chunk: list[tuple[Call, int]], width: int) -> torch.Tensor:
        """One forward of exactly `width` rows; the float64 logprobs of the chunk's rows."""
        device = self.pool.base.device
        idle = width - len(chunk)
        names = [self._name(call) for call, _ in chunk] + [BASE] * idle
        ids = [call.fed[row] for call, row in chunk] + [IDLE_TOKEN] * idle
        positions = [call.cache.length for call, _ in chunk] + [0] * idle  # type: ignore[union-attr]
        slots: list[tuple[RowCache, int] | None] = [(call.cache, row) for call, row in chunk]  # type: ignore[misc]
        slots += [None] * idle
        input_ids = torch.tensor(ids, dtype=torch.long, device=device).unsqueeze(1)
        position_ids = torch.tensor(positions, dtype=torch.long, device=device).unsqueeze(1)
        if self._layers_at != self.pool.loads:
            self._layers = lora_layers(self.pool.peft)
            self._layers_at = self.pool.loads
        with per_row_lora(self._layers, names), decode_step(StepRows(slots)):
            out = self.pool.peft(input_ids=input_ids, position_ids=position_ids, use_cache=False)
        return torch.log_softmax(upcast(out.logits[: len(chunk), -1]), dim=-1).to(torch.float64)

    def _leave(self, call: Call, error: EngineError | None) -> Answer:
        if call in self.live:
            self.live.remove(call)
            self.reserved -= call.reserved
        elif call in self.waiting:
            self.waiting.remove(call)
        call.cache = None
        if error is not None:
            return call.key, error
        if not call.tokens and not call.stop_reason:
            # Stopped before admission: its restored prefixes, unchanged.
            return call.key, _unstarted(call)
        return call.key, call.answer()


def _unstarted(call: Call) -> dict[str, Any]:
    return {
        "finished": False,
        "sequences": [
            {
                "stop_reason": None,
                "tokens": np.asarray(tokens, dtype=np.int32),
                "logprobs": np.asarray(logprobs, dtype=np.float32),
                **({"topk_logprobs": []} if call.params.topk_sample_logprobs > 0 else {}),
            }
            for tokens, logprobs in call.prefixes
        ],
    }
