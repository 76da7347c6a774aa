"""Live sample continuation (sampling.py, engine.py): a sliced call that passes each slice's
`continuation` back answers the same bits as one uncut call and as the same slices replayed from their
prefixes (P6), SDK 0.26+ outputs included, without replaying; anything that does not fit the kept
state (another prefix, request or sampler, a dropped or released key) replays. The states kept are
bounded by count and bytes; a state that does not fit is not kept unless stale ones make room
(live_samples.py), so calls rotating through more slices than the store holds keep the states they have."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import create, encoded, pass_input, sequence_datum

from tinker_engine.engine import Engine
from tinker_engine.errors import ProtocolError

PROMPT = [72, 101, 108, 108, 111, 32, 119, 111]
MAX_TOKENS = 20
SLICE = 6


def _sampler(engine: Engine) -> str:
    handle = create(engine, seed=11)
    batch = pass_input([sequence_datum([3, 1, 4, 1, 5, 9, 2, 6, 5])])
    handle = engine.dispatch("forward_backward", {"state": handle, "input": batch})["state"]["handle"]
    handle = engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 0.05}})["state"]["handle"]
    weights = engine.dispatch("export_weights", {"state": handle, "kind": "sampler"})["weights"]
    return engine.dispatch("load_sampler", {"base_model": engine.base.name, "weights": weights})["sampler"]


def _request(stop: list[list[int]] | None = None, num_samples: int = 4, seed: int = 424242) -> dict[str, Any]:
    target = np.asarray(
        [[(5 * r + c) % 256 if (r + c) % 2 else -1 for c in range(2)] for r in range(len(PROMPT) - 1)], dtype=np.int32
    )
    return {
        "prompt": encoded(PROMPT),
        "num_samples": num_samples,
        "sampling_params": {
            "max_tokens": MAX_TOKENS,
            "temperature": 0.8,
            "top_k": 50,
            "top_p": 0.95,
            "seed": seed,
            **({"stop": stop} if stop is not None else {}),
        },
        "prompt_logprobs": True,
        "topk_prompt_logprobs": 3,
        "topk_sample_logprobs": 4,
        "prompt_alt_tokens_k": 2,
        "target_prompt_logprobs": target,
    }


def _call(engine: Engine, sampler: str, request: dict[str, Any], **args: Any) -> dict[str, Any]:
    return engine.dispatch("sample", {"sampler": sampler, "request": request, **args})


def _resume(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"tokens": s["tokens"], "logprobs": s["logprobs"]} for s in run["sequences"]]


def _slices(
    engine: Engine, sampler: str, request: dict[str, Any], keyed: bool, cut: int = SLICE
) -> Iterator[dict[str, Any]]:
    """Each slice's answer of a call run as the worker runs it: resumed from the tokens so far."""
    run = _call(engine, sampler, request, max_new_tokens=cut)
    yield run
    while not run["finished"]:
        key = run.get("continuation") if keyed else None
        run = _call(engine, sampler, request, resume=_resume(run), max_new_tokens=cut, continuation=key)
        yield run


def _assert_same_run(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every answered field, bit for bit (logprobs compared as float32 bytes)."""
    assert {k for k in got if k != "continuation"} == {k for k in expected if k != "continuation"}
    for key in ("finished", "prompt_logprobs", "topk_prompt_logprobs", "prompt_alt_tokens", "target_prompt_logprobs"):
        assert got.get(key) == expected.get(key), key
    for a, b in zip(got["sequences"], expected["sequences"], strict=True):
        assert a["stop_reason"] == b["stop_reason"]
        assert a["tokens"].tobytes() == b["tokens"].tobytes()
        assert a["logprobs"].tobytes() == b["logprobs"].tobytes()
        assert a.get("topk_logprobs") == b.get("topk_logprobs")


@pytest.fixture
def forwards_of(monkeypatch: pytest.MonkeyPatch) -> Callable[[Engine], list[int]]:
    """The batch size of every model forward an engine runs."""

    def count(engine: Engine) -> list[int]:
        sizes: list[int] = []
        inner = engine.pool.forward

        def counted(names: list[str], **inputs: Any) -> Any:
            sizes.append(len(names))
            return inner(names, **inputs)

        monkeypatch.setattr(engine.pool, "forward", counted)
        return sizes

    return count


@pytest.fixture
def forwards(engine: Engine, forwards_of: Callable[[Engine], list[int]]) -> list[int]:
    return forwards_of(engine)


def _stop_ending_one_row_early(engine: Engine, sampler: str) -> list[list[int]]:
    """A two-token stop that ends row 0 partway and leaves another row running to max_tokens."""
    free = _call(engine, sampler, _request())["sequences"]
    for at in range(SLICE + 1, MAX_TOKENS - 4):
        stop = [free[0]["tokens"][at : at + 2].tolist()]
        rows = _call(engine, sampler, _request(stop))["sequences"]
        if rows[0]["stop_reason"] == "stop" and any(row["stop_reason"] == "length" for row in rows):
            return stop
    raise AssertionError("no stop in row 0 leaves another row running")


def test_a_sliced_call_continued_live_equals_one_slice_and_the_replayed_slices(
    engine: Engine, forwards: list[int]
) -> None:
    sampler = _sampler(engine)
    request = _request(_stop_ending_one_row_early(engine, sampler))
    forwards.clear()
    whole = _call(engine, sampler, request)
    one_slice = len(forwards)
    assert whole["finished"] and "continuation" not in whole
    rows = whole["sequences"]
    assert rows[0]["stop_reason"] == "stop" and rows[0]["tokens"].size < MAX_TOKENS

    forwards.clear()
    live = list(_slices(engine, sampler, request, keyed=True))
    live_forwards = len(forwards)
    # Each key was used once and the finished call keeps nothing.
    assert not engine.live_samples
    replayed = list(_slices(engine, sampler, request, keyed=False))
    slices = -(-MAX_TOKENS // SLICE)
    assert len(live) == len(replayed) == slices
    for a, b in zip(live, replayed, strict=True):
        _assert_same_run(a, b)
    _assert_same_run(live[-1], whole)
    # Each unfinished slice answers a key; the last, finished, answers none.
    assert all(isinstance(run.get("continuation"), str) for run in live[:-1])
    assert "continuation" not in live[-1]
    # No prefix is replayed: the prompt runs once and each step once, as in one slice.
    assert live_forwards == one_slice


def test_a_resume_the_state_does_not_hold_replays(engine: Engine) -> None:
    sampler = _sampler(engine)
    request = _request()
    whole = _call(engine, sampler, request)
    first = _call(engine, sampler, request, max_new_tokens=SLICE)
    key = first["continuation"]
    # Resumed from a shorter prefix (as after a cut elsewhere): the key is ignored, and used up.
    shorter = [{"tokens": s["tokens"][:3], "logprobs": s["logprobs"][:3]} for s in first["sequences"]]
    rest = _call(engine, sampler, request, resume=shorter, continuation=key)
    _assert_same_run(rest, whole)
    assert key not in engine.live_samples
    # The right prefix under a used key replays too.
    rest = _call(engine, sampler, request, resume=_resume(first), continuation=key)
    _assert_same_run(rest, whole)
    # A changed logprob is not the state's prefix: replayed, and the answer carries the resumed value.
    second = _call(engine, sampler, request, max_new_tokens=SLICE)
    changed = _resume(second)
    changed[1] = {"tokens": changed[1]["tokens"], "logprobs": changed[1]["logprobs"].copy()}
    changed[1]["logprobs"][0] = np.float32(-1.5)
    rest = _call(engine, sampler, request, resume=changed, continuation=second["continuation"])
    assert rest["sequences"][1]["logprobs"][0] == np.float32(-1.5)
    _assert_same_run(
        {**rest, "sequences": [rest["sequences"][0], *rest["sequences"][2:]]},
        {**whole, "sequences": [whole["sequences"][0], *whole["sequences"][2:]]},
    )


def test_prefixes_of_different_lengths_keep_no_state_and_answer_the_uncut_call(engine: Engine) -> None:
    sampler = _sampler(engine)
    request = _request()
    whole = _call(engine, sampler, request)
    first = _call(engine, sampler, request, max_new_tokens=SLICE)
    # As after a cut whose save of sequence 1 failed: it restarts from an older, shorter prefix.
    resume = _resume(first)
    resume[1] = {"tokens": resume[1]["tokens"][:2], "logprobs": resume[1]["logprobs"][:2]}
    run = _call(engine, sampler, request, resume=resume, max_new_tokens=SLICE)
    assert not run["finished"] and "continuation" not in run
    while not run["finished"]:
        run = _call(
            engine, sampler, request, resume=_resume(run), max_new_tokens=SLICE, continuation=run.get("continuation")
        )
    _assert_same_run(run, whole)


def test_another_request_or_sampler_does_not_continue_a_state(engine: Engine) -> None:
    sampler = _sampler(engine)
    other = engine.dispatch("load_sampler", {"base_model": engine.base.name, "weights": None})["sampler"]
    request = _request()
    first = _call(engine, sampler, request, max_new_tokens=SLICE)
    # Same prefixes, another sampler: what that sampler's replay answers.
    expected = _call(engine, other, request, resume=_resume(first))
    got = _call(engine, other, request, resume=_resume(first), continuation=first["continuation"])
    _assert_same_run(got, expected)
    # Same prefixes, another seed.
    first = _call(engine, sampler, request, max_new_tokens=SLICE)
    reseeded = {**request, "sampling_params": {**request["sampling_params"], "seed": 7}}
    expected = _call(engine, sampler, reseeded, resume=_resume(first))
    got = _call(engine, sampler, reseeded, resume=_resume(first), continuation=first["continuation"])
    _assert_same_run(got, expected)


def test_live_states_are_bounded_and_dropped_with_their_sampler(engine: Engine) -> None:
    sampler = _sampler(engine)
    request = _request(num_samples=1)
    whole = _call(engine, sampler, request)
    bound = engine.options.max_live_samples
    assert bound == 8
    firsts = [_call(engine, sampler, request, max_new_tokens=2) for _ in range(bound + 2)]
    keys = [run.get("continuation") for run in firsts]
    # The first `bound` are kept; the store being full, the others keep nothing and answer no key.
    assert all(isinstance(key, str) for key in keys[:bound]) and keys[bound:] == [None, None]
    assert list(engine.live_samples) == keys[:bound]
    # A call that got no key replays, to the same answer.
    _assert_same_run(_call(engine, sampler, request, resume=_resume(firsts[-1])), whole)
    assert engine.live_samples.bytes > 0
    engine.dispatch("release", {"handles": [sampler]})
    assert not engine.live_samples and engine.live_samples.bytes == 0


def _rotate(engine: Engine, sampler: str, requests: list[dict[str, Any]], forwards: list[int]) -> list[Any]:
    """The calls sliced side by side, one slice each in turn, as the worker runs a work item's samples:
    per call, its last answer and the model forwards its slices ran."""
    runs: list[dict[str, Any] | None] = [None] * len(requests)
    spent = [0] * len(requests)
    while any(run is None or not run["finished"] for run in runs):
        for c, request in enumerate(requests):
            run = runs[c]
            if run is not None and run["finished"]:
                continue
            before = len(forwards)
            if run is None:
                runs[c] = _call(engine, sampler, request, max_new_tokens=SLICE)
            else:
                key = run.get("continuation")
                runs[c] = _call(engine, sampler, request, resume=_resume(run), max_new_tokens=SLICE, continuation=key)
            spent[c] += len(forwards) - before
    return list(zip(runs, spent, strict=True))


def test_a_rotation_of_more_calls_than_the_bound_keeps_the_states_it_has(
    make_engine: Callable[..., Engine], forwards_of: Callable[[Engine], list[int]]
) -> None:
    bound = 3
    engine = make_engine(max_live_samples=bound)
    forwards = forwards_of(engine)
    sampler = _sampler(engine)
    requests = [_request(num_samples=2, seed=100 + c) for c in range(bound + 2)]
    forwards.clear()
    wholes = [_call(engine, sampler, request) for request in requests]
    one_slice = len(forwards) // len(requests)
    forwards.clear()
    rotated = _rotate(engine, sampler, requests, forwards)
    for (run, _), whole in zip(rotated, wholes, strict=True):
        _assert_same_run(run, whole)
    spent = [count for _, count in rotated]
    # The first `bound` calls hold their states through every slice: no prefix replayed, as one slice.
    assert spent[:bound] == [one_slice] * bound
    # The others are never kept while those run, so each of their slices replays.
    assert all(count > one_slice for count in spent[bound:])
    assert not engine.live_samples


def test_a_byte_bound_smaller_than_two_states_keeps_one(make_engine: Callable[..., Engine]) -> None:
    probe = make_engine()
    sampler = _sampler(probe)
    request, other = _request(seed=1), _request(seed=2)
    _call(probe, sampler, request, max_new_tokens=SLICE)
    one_state = probe.live_samples.bytes
    assert one_state > 0

    engine = make_engine(live_sample_bytes=2 * one_state - 1)
    sampler = _sampler(engine)
    wholes = [_call(engine, sampler, r) for r in (request, other)]
    first = _call(engine, sampler, request, max_new_tokens=SLICE)
    second = _call(engine, sampler, other, max_new_tokens=SLICE)
    assert isinstance(first.get("continuation"), str) and "continuation" not in second
    assert list(engine.live_samples) == [first["continuation"]] and engine.live_samples.bytes == one_state
    # The kept call continues (its state growing within the bound); the other replays; both exact.
    runs = [first, second]
    while not all(run["finished"] for run in runs):
        runs = [
            run
            if run["finished"]
            else _call(
                engine,
                sampler,
                r,
                resume=_resume(run),
                max_new_tokens=SLICE,
                continuation=run.get("continuation"),
            )
            for r, run in zip((request, other), runs, strict=True)
        ]
        assert engine.live_samples.bytes <= 2 * one_state - 1
    for run, whole in zip(runs, wholes, strict=True):
        _assert_same_run(run, whole)


def test_a_state_not_continued_within_the_idle_limit_makes_room(make_engine: Callable[..., Engine]) -> None:
    now = [0.0]
    engine = make_engine(max_live_samples=1, live_sample_idle_s=30.0, clock=lambda: now[0])
    sampler = _sampler(engine)
    request, other = _request(seed=1), _request(seed=2)
    whole = _call(engine, sampler, request)
    abandoned = _call(engine, sampler, request, max_new_tokens=SLICE)
    now[0] = 30.0
    # Idle for the limit, not longer: still live, so the other call is not kept.
    assert "continuation" not in _call(engine, sampler, other, max_new_tokens=SLICE)
    assert list(engine.live_samples) == [abandoned["continuation"]]
    now[0] = 30.5
    kept = _call(engine, sampler, other, max_new_tokens=SLICE)
    assert list(engine.live_samples) == [kept["continuation"]]
    # The dropped key replays, to the same answer.
    _assert_same_run(
        _call(engine, sampler, request, resume=_resume(abandoned), continuation=abandoned["continuation"]), whole
    )


def test_an_engine_that_keeps_no_live_bytes_answers_no_key(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(live_sample_bytes=0)
    sampler = _sampler(engine)
    first = _call(engine, sampler, _request(), max_new_tokens=SLICE)
    assert not first["finished"] and "continuation" not in first and not engine.live_samples


def test_an_engine_that_keeps_no_live_states_answers_no_key(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_live_samples=0)
    sampler = _sampler(engine)
    first = _call(engine, sampler, _request(), max_new_tokens=SLICE)
    assert not first["finished"] and "continuation" not in first and not engine.live_samples


def test_a_call_cut_at_zero_new_tokens_keeps_its_state(engine: Engine) -> None:
    sampler = _sampler(engine)
    request = _request()
    whole = _call(engine, sampler, request)
    first = _call(engine, sampler, request, max_new_tokens=SLICE)
    idle = _call(engine, sampler, request, resume=_resume(first), max_new_tokens=0, continuation=first["continuation"])
    _assert_same_run(idle, first)
    rest = _call(engine, sampler, request, resume=_resume(idle), continuation=idle["continuation"])
    _assert_same_run(rest, whole)


def test_a_continuation_that_is_not_a_string_is_a_protocol_error(engine: Engine) -> None:
    sampler = _sampler(engine)
    with pytest.raises(ProtocolError, match="continuation"):
        _call(engine, sampler, _request(), continuation=3)
