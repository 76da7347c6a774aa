"""Sampling (G4): exact resume of a cut call (P6), logprobs under the model's own distribution,
the KV cache against full forwards, stops, prompt logprobs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from conftest import create, encoded, pass_input, sequence_datum

from tinker_engine.engine import Engine
from tinker_engine.prng import sample_uniform
from tinker_engine.sampling import SampleParams, choose_token

PROMPT = [72, 101, 108, 108, 111, 32]


def _sampler(engine: Engine, trained: bool = True) -> str:
    if not trained:
        return engine.dispatch("load_sampler", {"base_model": engine.base.name, "weights": None})["sampler"]
    handle = create(engine, seed=7)
    batch = pass_input([sequence_datum([1, 2, 3, 4, 5, 6, 7, 8, 9])])
    handle = engine.dispatch("forward_backward", {"state": handle, "input": batch})["state"]["handle"]
    handle = engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 0.05}})["state"]["handle"]
    weights = engine.dispatch("export_weights", {"state": handle, "kind": "sampler"})["weights"]
    return engine.dispatch("load_sampler", {"base_model": engine.base.name, "weights": weights})["sampler"]


def _request(num_samples: int = 3, **params: Any) -> dict[str, Any]:
    sampling = {"max_tokens": 16, "temperature": 0.9, "top_k": 40, "top_p": 0.9, "seed": 12345, **params}
    return {"prompt": encoded(PROMPT), "num_samples": num_samples, "sampling_params": sampling}


def _sample(
    engine: Engine, sampler: str, request: dict[str, Any], resume: Any = None, cut: int | None = None
) -> dict[str, Any]:
    return engine.dispatch("sample", {"sampler": sampler, "request": request, "resume": resume, "max_new_tokens": cut})


def test_a_cut_call_resumed_from_its_prefixes_continues_exactly(engine: Engine) -> None:
    sampler = _sampler(engine)
    request = _request(stop=[[101, 108]])
    whole = _sample(engine, sampler, request)
    assert whole["finished"]
    first = _sample(engine, sampler, request, cut=5)
    assert not first["finished"]
    assert all(s["tokens"].size <= 5 for s in first["sequences"])
    resume = [{"tokens": s["tokens"], "logprobs": s["logprobs"]} for s in first["sequences"]]
    second = _sample(engine, sampler, request, resume=resume, cut=4)
    resume = [{"tokens": s["tokens"], "logprobs": s["logprobs"]} for s in second["sequences"]]
    rest = _sample(engine, sampler, request, resume=resume)
    assert rest["finished"]
    for expected, got in zip(whole["sequences"], rest["sequences"], strict=True):
        assert got["stop_reason"] == expected["stop_reason"]
        np.testing.assert_array_equal(got["tokens"], expected["tokens"])
        np.testing.assert_array_equal(got["logprobs"], expected["logprobs"])


def test_sampled_logprobs_are_the_models_own_and_match_a_full_forward(engine: Engine) -> None:
    sampler = _sampler(engine)
    run = _sample(engine, sampler, _request(num_samples=2, max_tokens=12, temperature=1.5, top_k=0, top_p=1.0))
    adapter = engine.samplers[sampler].adapter
    assert adapter is not None
    # A training state with the sampler's weights scores prompt + sample by a forward pass.
    handle = create(engine, seed=7)
    engine.states[handle].weights = {k: v.detach().clone() for k, v in adapter.weights.items()}
    for sequence in run["sequences"]:
        tokens = PROMPT + sequence["tokens"].tolist()
        result = engine.dispatch("forward", {"state": handle, "input": pass_input([sequence_datum(tokens)])})["result"]
        scored = result["loss_fn_outputs"][0]["logprobs"][len(PROMPT) - 1 :]
        np.testing.assert_allclose(sequence["logprobs"], scored, rtol=1e-4, atol=1e-5)


def test_seeded_sampling_is_reproducible_and_seeds_differ(engine: Engine) -> None:
    sampler = _sampler(engine, trained=False)
    a = _sample(engine, sampler, _request(seed=1))
    b = _sample(engine, sampler, _request(seed=1))
    c = _sample(engine, sampler, _request(seed=2))
    tokens = lambda run: [s["tokens"].tolist() for s in run["sequences"]]  # noqa: E731
    assert tokens(a) == tokens(b)
    assert tokens(a) != tokens(c)
    assert len({tuple(t) for t in tokens(a)}) > 1, "samples of one call draw different tokens"


def test_greedy_takes_the_most_likely_token(engine: Engine) -> None:
    sampler = _sampler(engine, trained=False)
    run = _sample(engine, sampler, {**_request(num_samples=1, temperature=0.0, max_tokens=6), "prompt_logprobs": True})
    handle = create(engine)
    tokens = PROMPT + run["sequences"][0]["tokens"].tolist()
    for n in range(6):
        prefix = tokens[: len(PROMPT) + n]
        targets = np.tile(np.arange(256, dtype=np.int64), (len(prefix), 1))
        from conftest import datum

        result = engine.dispatch("forward", {"state": handle, "input": pass_input([datum(prefix, targets)])})["result"]
        last = result["loss_fn_outputs"][0]["logprobs"][-1]
        assert tokens[len(PROMPT) + n] == int(np.argmax(last))


def test_stops_and_lengths(engine: Engine) -> None:
    sampler = _sampler(engine, trained=False)
    free = _sample(engine, sampler, _request(num_samples=1, temperature=0.0, max_tokens=10))["sequences"][0]
    assert free["stop_reason"] == "length" and free["tokens"].size == 10
    third = int(free["tokens"][2])
    by_token = _sample(engine, sampler, _request(num_samples=1, temperature=0.0, max_tokens=10, stop=[third]))[
        "sequences"
    ][0]
    assert by_token["stop_reason"] == "stop"
    assert by_token["tokens"][-1] == third and by_token["tokens"].size <= 3
    # A stop string is encoded by the base model's tokenizer (here byte-level: its UTF-8 bytes).
    tokenizer = engine.base.tokenizer
    pair = next(
        free["tokens"][i : i + 2].tolist()
        for i in range(1, 9)
        if tokenizer.encode(tokenizer.decode(free["tokens"][i : i + 2].tolist()), add_special_tokens=False)
        == free["tokens"][i : i + 2].tolist()
    )
    text = tokenizer.decode(pair)
    as_string = _sample(engine, sampler, _request(num_samples=1, temperature=0.0, max_tokens=10, stop=[text]))[
        "sequences"
    ][0]
    assert as_string["stop_reason"] == "stop" and as_string["tokens"][-2:].tolist() == pair


def test_prompt_logprobs_and_topk(engine: Engine) -> None:
    sampler = _sampler(engine, trained=False)
    run = _sample(
        engine, sampler, {**_request(num_samples=1, max_tokens=1), "prompt_logprobs": True, "topk_prompt_logprobs": 3}
    )
    assert run["prompt_logprobs"][0] is None and len(run["prompt_logprobs"]) == len(PROMPT)
    assert run["topk_prompt_logprobs"][0] is None
    for t in range(1, len(PROMPT)):
        top = run["topk_prompt_logprobs"][t]
        assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]
        assert run["prompt_logprobs"][t] <= top[0][1] + 1e-6


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"temperature": -1}, "sampling_params.temperature"),
        ({"top_p": 0}, "sampling_params.top_p"),
        ({"max_tokens": 0}, "sampling_params.max_tokens"),
        ({"stop": [999]}, "sampling_params.stop[0]"),
    ],
)
def test_bad_sampling_params_are_user_errors(engine: Engine, change: dict[str, Any], field: str) -> None:
    from tinker_engine.errors import UserError

    sampler = _sampler(engine, trained=False)
    with pytest.raises(UserError) as raised:
        _sample(engine, sampler, _request(**change))
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("seed", "index", "position", "expected"),
    # uniformAt(TAG_SAMPLE, ...seedWords(seed), index, position) of shared/backend/reference/prng.ts.
    [
        (0, 0, 0, 0.947716022615947),
        (12345, 2, 7, 0.087928654947802),
        (-1, 255, 1000, 0.46234559211710413),
        (2**40 + 3, 1, 2, 0.8285747233953703),
    ],
)
def test_draws_are_the_reference_prngs(seed: int, index: int, position: int, expected: float) -> None:
    assert sample_uniform(seed, index, position) == expected


def _reference_choice(logprobs: list[float], temperature: float, top_k: int, top_p: float, u: float) -> int:
    """chooseToken of shared/backend/reference/sampler.ts, transcribed loop for loop."""
    vocab = len(logprobs)
    best = max(range(vocab), key=lambda v: (logprobs[v], -v))
    if temperature == 0 or top_k == 1:
        return best
    order = sorted(range(vocab), key=lambda v: (-logprobs[v], v)) if top_k > 0 or top_p < 1 else None
    count = min(top_k, vocab) if top_k > 0 else vocab
    weights = [math.exp((logprobs[order[c] if order else c] - logprobs[best]) / temperature) for c in range(count)]
    total = sum(weights)
    if top_p < 1:
        threshold, kept, cumulative = top_p * total, 0, 0.0
        while kept < count and cumulative < threshold:
            cumulative += weights[kept]
            kept += 1
        count, total = kept, cumulative
    target, cumulative = u * total, 0.0
    for c in range(count):
        cumulative += weights[c]
        if target < cumulative:
            return order[c] if order else c
    return order[count - 1] if order else count - 1


def test_token_choice_follows_the_reference_rule() -> None:
    rng = np.random.default_rng(1)
    for case in range(300):
        logprobs = torch.log_softmax(torch.tensor(rng.normal(size=40) * 2), dim=0).to(torch.float64)
        logprobs[rng.integers(0, 40)] = logprobs[rng.integers(0, 40)]  # a tie now and then
        temperature = [0.0, 0.5, 1.0, 1.7][case % 4]
        top_k = [0, 1, 5, 50][(case // 4) % 4]
        top_p = [1.0, 0.9, 0.3][(case // 16) % 3]
        u = float(rng.random())
        params = SampleParams(np.zeros(1), 1, 1, temperature, top_k, top_p, 0, [], False, 0)
        assert choose_token(logprobs, params, u) == _reference_choice(logprobs.tolist(), temperature, top_k, top_p, u)
