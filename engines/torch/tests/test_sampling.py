"""Sampling (G4): exact resume of a cut call (P6), logprobs under the model's own distribution,
the KV cache against full forwards, stops, prompt logprobs, the SDK 0.26+ outputs (top-k sample
logprobs, prompt alternative tokens, target prompt logprobs)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from conftest import create, encoded, pass_input, sequence_datum

from tinker_engine.engine import Engine
from tinker_engine.prng import alt_uniform, sample_uniform, sample_uniforms
from tinker_engine.sampling import SampleParams, choose_token, choose_tokens

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


def test_rows_chosen_together_choose_what_each_chooses_alone() -> None:
    """choose_tokens on a batch of rows (the batched decoder's way) gives every row the token the
    one-row rule gives it, for every sampling rule (G4: a row's token does not depend on its batch)."""
    rng = np.random.default_rng(2)
    for case in range(48):
        rows = torch.log_softmax(torch.tensor(rng.normal(size=(33, 300)) * 3), dim=-1).to(torch.float64)
        temperature = [0.0, 0.7, 1.0, 1.3][case % 4]
        top_k = [0, 1, 7, 500][(case // 4) % 4]
        top_p = [1.0, 0.8, 0.2][(case // 16) % 3]
        uniforms = [float(u) for u in rng.random(33)]
        params = SampleParams(np.zeros(1), 1, 1, temperature, top_k, top_p, 0, [], False, 0)
        together = choose_tokens(rows, params, uniforms)
        assert together == [choose_token(rows[r], params, uniforms[r]) for r in range(33)]
        assert together[:5] == choose_tokens(rows[:5], params, uniforms[:5])


@pytest.mark.parametrize(
    ("seed", "position", "draw", "expected"),
    # uniformAt(TAG_ALT, ...seedWords(seed), position, draw) of shared/backend/reference/prng.ts.
    [(0, 1, 0, 0.36311581389356595), (12345, 5, 3, 0.4049806735729541), (-1, 1000, 255, 0.24292924976408437)],
)
def test_alt_draws_are_the_reference_prngs(seed: int, position: int, draw: int, expected: float) -> None:
    assert alt_uniform(seed, position, draw) == expected


def _full_logprobs(engine: Engine, tokens: list[int]) -> np.ndarray:
    """[len(tokens), vocab]: the base model's log-softmax after each token, by a plain forward pass."""
    from conftest import datum

    vocab = engine.base.vocab_size
    targets = np.tile(np.arange(vocab, dtype=np.int64), (len(tokens), 1))
    result = engine.dispatch("forward", {"state": create(engine), "input": pass_input([datum(tokens, targets)])})
    return np.asarray(result["result"]["loss_fn_outputs"][0]["logprobs"])


def test_topk_sample_logprobs_rank_the_models_distribution_at_each_step(engine: Engine) -> None:
    sampler = _sampler(engine, trained=False)
    run = _sample(engine, sampler, {**_request(num_samples=2, max_tokens=6), "topk_sample_logprobs": 4})
    for sequence in run["sequences"]:
        rows = sequence["topk_logprobs"]
        assert len(rows) == sequence["tokens"].size
        full = _full_logprobs(engine, PROMPT + sequence["tokens"].tolist())
        for n, row in enumerate(rows):
            at = torch.from_numpy(full[len(PROMPT) - 1 + n])
            expected = torch.topk(at, 4)
            ids = [pair[0] for pair in row]
            values = [pair[1] for pair in row]
            np.testing.assert_allclose(values, expected.values.numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(at[ids].numpy(), values, rtol=1e-4, atol=1e-5)
            assert values == sorted(values, reverse=True)
            # The sampled token's logprob is read from the same distribution.
            assert sequence["logprobs"][n] <= values[0] + 1e-6


def test_topk_sample_rows_of_a_resumed_call_equal_an_uncut_one(engine: Engine) -> None:
    sampler = _sampler(engine)
    request = {**_request(stop=[[101, 108]]), "topk_sample_logprobs": 5}
    whole = _sample(engine, sampler, request)
    first = _sample(engine, sampler, request, cut=4)
    assert not first["finished"]
    resume = [{"tokens": s["tokens"], "logprobs": s["logprobs"]} for s in first["sequences"]]
    rest = _sample(engine, sampler, request, resume=resume)
    assert rest["finished"]
    for expected, got in zip(whole["sequences"], rest["sequences"], strict=True):
        np.testing.assert_array_equal(got["tokens"], expected["tokens"])
        assert got["topk_logprobs"] == expected["topk_logprobs"]
    # Restored rows are recomputed even when nothing is left to generate.
    done = [{"tokens": s["tokens"], "logprobs": s["logprobs"]} for s in whole["sequences"]]
    again = _sample(engine, sampler, request, resume=done, cut=0)
    assert [s["topk_logprobs"] for s in again["sequences"]] == [s["topk_logprobs"] for s in whole["sequences"]]


def test_target_prompt_logprobs_read_the_prompts_distribution_at_the_asked_ids(engine: Engine) -> None:
    sampler = _sampler(engine, trained=False)
    rows = len(PROMPT) - 1
    ids = [[(7 * r + c) % 256 if (r + c) % 3 else -1 for c in range(3)] for r in range(rows)]
    target = np.asarray(ids, dtype=np.int32)
    run = _sample(engine, sampler, {**_request(num_samples=1, max_tokens=1), "target_prompt_logprobs": target})
    full = _full_logprobs(engine, PROMPT)
    answered = run["target_prompt_logprobs"]
    assert len(answered) == rows
    for r in range(rows):
        for c in range(3):
            if ids[r][c] == -1:
                assert answered[r][c] is None
            else:
                assert answered[r][c] == pytest.approx(full[r, ids[r][c]], rel=1e-4, abs=1e-5)


def test_prompt_alt_tokens_are_seeded_draws_with_the_models_logprobs(engine: Engine) -> None:
    sampler = _sampler(engine, trained=False)
    ask = lambda seed: {**_request(num_samples=1, max_tokens=1, seed=seed), "prompt_alt_tokens_k": 6}  # noqa: E731
    a = _sample(engine, sampler, ask(3))["prompt_alt_tokens"]
    b = _sample(engine, sampler, ask(3))["prompt_alt_tokens"]
    c = _sample(engine, sampler, ask(4))["prompt_alt_tokens"]
    assert a == b
    assert a["tokens"] != c["tokens"]
    assert len(a["tokens"]) == len(PROMPT) - 1 and all(len(row) == 6 for row in a["tokens"])
    full = _full_logprobs(engine, PROMPT)
    for r, (tokens, logprobs) in enumerate(zip(a["tokens"], a["logprobs"], strict=True)):
        np.testing.assert_allclose(logprobs, full[r, tokens], rtol=1e-4, atol=1e-5)
        # Each draw is the reference's inverse-CDF choice at the request's temperature (0.9), no top-k/top-p.
        row = torch.from_numpy(full[r]).to(torch.float64)
        params = SampleParams(
            prompt=np.asarray(PROMPT), num_samples=1, max_tokens=1, temperature=0.9, top_k=0, top_p=1.0,
            seed=3, stops=[], prompt_logprobs=False, topk_prompt_logprobs=0,
        )  # fmt: skip
        for j, token in enumerate(tokens):
            u = alt_uniform(3, r + 1, j)
            assert token == choose_token(row, params, u)
    greedy = _sample(engine, sampler, {**ask(3), "sampling_params": {"temperature": 0.0, "max_tokens": 1}})
    for r, tokens in enumerate(greedy["prompt_alt_tokens"]["tokens"]):
        assert tokens == [int(np.argmax(full[r]))] * 6


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"topk_sample_logprobs": -1}, "topk_sample_logprobs"),
        ({"topk_sample_logprobs": 1.5}, "topk_sample_logprobs"),
        ({"prompt_alt_tokens_k": -2}, "prompt_alt_tokens_k"),
        ({"target_prompt_logprobs": [1, 2]}, "target_prompt_logprobs"),
        ({"target_prompt_logprobs": np.asarray([1, 2, 3, 4, 5], dtype=np.int32)}, "target_prompt_logprobs"),
        ({"target_prompt_logprobs": np.asarray([[0.5]] * 5, dtype=np.float32)}, "target_prompt_logprobs"),
        ({"target_prompt_logprobs": np.asarray([[1], [2], [3]], dtype=np.int32)}, "target_prompt_logprobs.shape"),
        (
            {"target_prompt_logprobs": np.asarray([[1], [2], [3], [4], [256]], dtype=np.int32)},
            "target_prompt_logprobs.data[4]",
        ),
        (
            {"target_prompt_logprobs": np.asarray([[1], [-2], [3], [4], [5]], dtype=np.int32)},
            "target_prompt_logprobs.data[1]",
        ),
    ],
)
def test_bad_sdk_outputs_requests_are_user_errors(engine: Engine, change: dict[str, Any], field: str) -> None:
    from tinker_engine.errors import UserError

    sampler = _sampler(engine, trained=False)
    with pytest.raises(UserError) as raised:
        _sample(engine, sampler, {**_request(), **change})
    assert raised.value.field == field


def test_sample_uniforms_are_the_keyed_draws_bit_for_bit() -> None:
    """The decoder's vectorised draws (one computation per step for every call) are sample_uniform's."""
    keys = [
        (seed, index, position)
        for seed in (0, 7, -3, 2**64 - 1, -(2**63))
        for index in (0, 5, 255)
        for position in (0, 1, 4095)
    ]
    assert sample_uniforms(keys) == [sample_uniform(*key) for key in keys]
    assert sample_uniforms([]) == []
