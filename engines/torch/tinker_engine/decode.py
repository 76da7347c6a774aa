"""Batched decode (B1): every live sample call advances in shared decode steps (protocol version 2).

Calls join and leave at step boundaries. Every admitted row holds a slot of the KV arena
(row_attention.py: per layer `[slots, kv heads, positions, head size]`, grown at admission, dropped
when idle); a call is admitted when the arena, grown for its rows and its worst case (prompt +
max_tokens positions), stays within the KV budget; the rest wait in arrival order (a call larger than
the whole budget runs when nothing else is admitted). On admission its prompt runs alone (the same
forward as sampling.py's; calls of one prompt on one sampler admitted together share it), and its rows
join the next step. A step feeds each live row its last token: rows are packed into forwards of at
most `decode_rows` rows, each as many whole tiles of `tile_rows` as its rows fill (idle rows of the last
tile hold a placeholder; row_tiles.py), each row at its own position, with its call's adapter (a
per-row LoRA product, row_lora.py), attending over its own cache. The step's tokens are then chosen
for every row at once (sampling.choose_tokens, keyed draws from prng.py).

Exactness (G4, P6): a row's matrix products have one shape whatever calls share its step (a tile, a LoRA
block), its other operations work elementwise or along the row, a row's result does not depend on the
other rows' values at equal shapes, and attention reads exactly the row's positions; so
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
from .row_attention import KvArena, StepRows, decode_step, install
from .row_lora import BASE, lora_layers, per_row_lora
from .row_tiles import base_linears, check_tile_rows, tiled
from .sampling import (
    IDLE_TOKEN,
    SampleParams,
    choose_tokens,
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
    positions: int
    # The call's rows' KV arena slots (row_attention.py) and how many positions they hold.
    slots: list[int] = field(default_factory=list)
    length: int = 0
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
    rows: int = 0
    # Whether a row has a step to take (set by `settle` after each change of the rows).
    stepping: bool = True

    def __post_init__(self) -> None:
        self.rows = self.params.num_samples

    def active(self, row: int) -> bool:
        return self.stop_reason[row] is None and self.generated[row] < self.budget

    def settle(self) -> None:
        k = self.params.topk_sample_logprobs
        self.stepping = any(self.active(i) or (k > 0 and self.step < self.replay[i]) for i in range(self.rows))

    def choosing(self) -> list[int]:
        """The rows that choose a token at this step (the others replay a restored token or idle)."""
        return [i for i in range(self.rows) if self.step >= self.replay[i] and self.active(i)]

    def advance(self, rows: torch.Tensor, chosen: dict[int, tuple[int, float]]) -> None:
        """Takes the step's tokens: `chosen[i]` (token, logprob) for the rows of `choosing()`, the
        restored token for a replaying row; `rows` (float64 logprobs) ranks the top-k outputs."""
        k = self.params.topk_sample_logprobs
        ranked = topk_rows_of(rows, k) if k > 0 else None
        fed: list[int] = []
        for i in range(self.rows):
            if self.step < self.replay[i]:
                if ranked is not None:
                    self.topk[i].append(ranked[i])
                fed.append(self.tokens[i][self.step])
            elif i in chosen:
                if ranked is not None:
                    self.topk[i].append(ranked[i])
                token, logprob = chosen[i]
                self.tokens[i].append(token)
                self.logprobs[i].append(logprob)
                self.generated[i] += 1
                self.stop_reason[i] = self.finish(i)
                fed.append(token)
            else:
                fed.append(IDLE_TOKEN)
        self.step += 1
        self.fed = fed
        self.settle()

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
    return 2 * config.num_hidden_layers * _kv_heads(pool) * _head_size(pool) * _itemsize(pool)


def _kv_heads(pool: AdapterPool) -> int:
    config = pool.base.model.config
    return int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)


def _head_size(pool: AdapterPool) -> int:
    config = pool.base.model.config
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def _itemsize(pool: AdapterPool) -> int:
    return torch.empty((), dtype=pool.base.dtype).element_size()


Answer = tuple[Any, dict[str, Any] | EngineError]


class Decoder:
    """The engine's live sample calls and their shared decode steps."""

    def __init__(self, pool: AdapterPool, decode_rows: int, tile_rows: int, kv_budget_bytes: int) -> None:
        check_tile_rows(tile_rows)
        install()
        self.pool = pool
        self.tile_rows = tile_rows
        # Whole tiles, at least one.
        self.decode_rows = max(1, -(-decode_rows // tile_rows)) * tile_rows
        self.kv_budget_bytes = kv_budget_bytes
        self.per_position = kv_bytes_per_position(pool)
        config = pool.base.model.config
        self.arena = KvArena(
            config.num_hidden_layers, _kv_heads(pool), _head_size(pool), pool.base.dtype, pool.base.device
        )
        self.waiting: deque[Call] = deque()
        self.live: list[Call] = []
        # The model's LoRA layers, listed again after an adapter load (one may adapt new modules).
        self._layers: list[Any] = []
        self._layers_at = -1

    @property
    def busy(self) -> bool:
        return bool(self.live or self.waiting)

    @property
    def kv_bytes(self) -> int:
        """The KV arena's size: what the budget bounds."""
        return self._arena_bytes(self.arena.slots, self.arena.positions)

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
        budget = max_new_tokens if max_new_tokens is not None else params.max_tokens
        self.waiting.append(Call(key, params, adapter, prefixes, budget, positions))

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
        for call in [c for c in self.live if not c.stepping]:
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

    def _arena_bytes(self, slots: int, positions: int) -> int:
        return slots * positions * self.per_position

    def _admit(self) -> list[Answer]:
        # The waiting calls that fit, in arrival order: the arena grown for all of their rows and the
        # longest of their worst cases stays within the budget (or nothing else is admitted).
        admitted: list[Call] = []
        rows, positions = self.arena.held, self.arena.positions
        while self.waiting:
            call = self.waiting[0]
            slots = max(self.arena.slots, rows + call.rows)
            longest = max(positions, call.positions)
            if (self.live or admitted) and self._arena_bytes(slots, longest) > self.kv_budget_bytes:
                break
            admitted.append(self.waiting.popleft())
            rows, positions = rows + call.rows, longest
        if not admitted:
            return []
        # Grown once for them all, with room for the calls still waiting where the budget allows (an RL
        # batch arrives over several steps).
        slots = max(self.arena.slots, rows)
        affordable = self.kv_budget_bytes // max(1, self._arena_bytes(1, positions))
        spare = sum(call.rows for call in self.waiting)
        self.arena.reserve(max(slots, min(affordable, slots + spare)), positions)
        # An adapter's calls side by side: they take consecutive slots and rows (row_lora.py multiplies
        # an adapter by the blocks of rows holding its calls) and share their prompt forwards.
        first: dict[int, int] = {}
        for call in admitted:
            first.setdefault(id(call.adapter), len(first))
        admitted.sort(key=lambda call: first[id(call.adapter)])
        answers: list[Answer] = []
        # Prompt forwards of this admission by (adapter, prompt): calls of one prompt on one sampler
        # (an RL group's) share it; the same forward on the same inputs, so the same bits.
        prompts: dict[tuple[int, bytes], tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]] = {}
        started: list[tuple[Call, torch.Tensor]] = []
        for call in admitted:
            self.live.append(call)
            try:
                started.append((call, self._start(call, prompts)))
            except Exception as error:  # noqa: BLE001 - the call's failure, answered like any other
                failure = error if isinstance(error, EngineError) else InfrastructureError(f"sample: {error}")
                answers.append(self._leave(call, failure))
        # The admitted calls' first tokens, chosen together.
        choosing = [(call, rows) for call, rows in started if call.stepping]
        if choosing:
            self._choose([call for call, _ in choosing], torch.cat([rows for _, rows in choosing]))
        return answers

    @torch.no_grad()
    def _start(
        self,
        call: Call,
        prompts: dict[tuple[int, bytes], tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]],
    ) -> torch.Tensor:
        """Runs the prompt (or takes this admission's run of it) into the call's arena slots and sets
        up its rows; the float64 logprobs its rows choose their first tokens from."""
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
        call.slots = self.arena.take(call.rows)
        self.arena.fill(call.slots, layers)
        call.length = params.prompt.size
        call.result = prompt_outputs(prompt, prompt_lp, params)
        call.tokens = [list(p[0]) for p in call.prefixes]
        call.logprobs = [list(p[1]) for p in call.prefixes]
        call.replay = [len(p[0]) for p in call.prefixes]
        call.topk = [[] for _ in range(call.rows)]
        call.generated = [0] * call.rows
        call.stop_reason = [call.finish(i) if call.tokens[i] else None for i in range(call.rows)]
        call.settle()
        return prompt_lp[-1].to(torch.float64).unsqueeze(0).expand(call.rows, -1)

    # ---- steps

    def _name(self, call: Call) -> str:
        return call.adapter.slot if call.adapter is not None and call.adapter.slot is not None else BASE

    @torch.no_grad()
    def _decode(self) -> None:
        adapters = {id(c.adapter): c.adapter for c in self.live if c.adapter is not None}
        self.pool.activate(list(adapters.values()))
        stepping = [call for call in self.live if call.stepping]
        slots = [(call, row) for call in stepping for row in range(call.rows)]
        most, tile = self.decode_rows, self.tile_rows
        chunks = [slots[start : start + most] for start in range(0, len(slots), most)]
        # Each forward as many whole tiles as its rows need (row_tiles.py).
        logprobs = torch.cat([self._forward(chunk, -(-len(chunk) // tile) * tile) for chunk in chunks])
        for call in stepping:
            call.length += 1
        self._choose(stepping, logprobs)

    def _choose(self, calls: list[Call], logprobs: torch.Tensor) -> None:
        """Advances each call by one step from its rows' float64 logprobs, `logprobs` holding the calls'
        rows one after another: every choosing row of every call chooses its token together with the
        others of its sampling rule (sampling.choose_tokens), their keyed draws in one vectorised
        computation (prng.py)."""
        if not calls:
            return
        offsets: list[int] = []
        picks: list[dict[int, tuple[int, float]]] = []
        # Choosing rows by sampling rule: (call index, row).
        rules: dict[tuple[float, int, float], list[tuple[int, int]]] = {}
        offset = 0
        for c, call in enumerate(calls):
            offsets.append(offset)
            picks.append({})
            offset += call.rows
            params = call.params
            rule = rules.setdefault((params.temperature, params.top_k, params.top_p), [])
            rule.extend((c, i) for i in call.choosing())
        for members in rules.values():
            if not members:
                continue
            params = calls[members[0][0]].params
            uniforms = sample_uniforms([(calls[c].params.seed, i, calls[c].step) for c, i in members])
            index = torch.tensor([offsets[c] + i for c, i in members], dtype=torch.long, device=logprobs.device)
            table = logprobs.index_select(0, index)
            tokens = choose_tokens(table, params, uniforms)
            chosen = table.gather(1, torch.tensor(tokens, device=table.device).unsqueeze(1)).squeeze(1)
            for (c, i), token, logprob in zip(members, tokens, chosen.to(torch.float32).tolist(), strict=True):
                picks[c][i] = (token, logprob)
        for call, at, chosen_rows in zip(calls, offsets, picks, strict=True):
            call.advance(logprobs[at : at + call.rows], chosen_rows)

    def _forward(self, chunk: list[tuple[Call, int]], width: int) -> torch.Tensor:
        """One forward of `width` rows (whole tiles); the float64 logprobs of the chunk's rows."""
        device = self.pool.base.device
        idle = width - len(chunk)
        names = [self._name(call) for call, _ in chunk] + [BASE] * idle
        ids = [call.fed[row] for call, row in chunk] + [IDLE_TOKEN] * idle
        positions = [call.length for call, _ in chunk] + [0] * idle
        entries: list[tuple[int, int] | None] = [(call.slots[row], call.length) for call, row in chunk]
        entries += [None] * idle
        input_ids = torch.tensor(ids, dtype=torch.long, device=device).unsqueeze(1)
        position_ids = torch.tensor(positions, dtype=torch.long, device=device).unsqueeze(1)
        if self._layers_at != self.pool.loads:
            self._layers = lora_layers(self.pool.peft)
            base_linears(self.pool.peft)
            self._layers_at = self.pool.loads
        with (
            per_row_lora(self._layers, names),
            decode_step(StepRows.of(self.arena, entries)),
            tiled(self.tile_rows),
        ):
            out = self.pool.peft(input_ids=input_ids, position_ids=position_ids, use_cache=False)
        return torch.log_softmax(upcast(out.logits[: len(chunk), -1]), dim=-1).to(torch.float64)

    def _leave(self, call: Call, error: EngineError | None) -> Answer:
        if call in self.live:
            self.live.remove(call)
        elif call in self.waiting:
            self.waiting.remove(call)
        if call.slots:
            self.arena.give_back(call.slots)
            call.slots = []
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
