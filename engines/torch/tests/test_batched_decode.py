"""Batched decode (decode.py, protocol version 2, B1): a call's tokens, logprobs and SDK 0.26+ outputs
are the same bits alone, in a batch of 32, in a batch of mixed adapters, joining a running batch, and
stopped and resumed (G4, P6); calls beyond the KV budget wait instead of failing; `stop_sample` ends
a running call at the next step; the version 2 server answers out of order by id."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import create, encoded, pass_input, sequence_datum

from tinker_engine.decode import kv_bytes_per_position
from tinker_engine.engine import Engine
from tinker_engine.protocol import Encoder, Frame, read_frame, write_frame
from tinker_engine.server import encode_value, serve

PROMPT = [72, 101, 108, 108, 111, 32, 119, 111]
MAX_TOKENS = 24


@pytest.fixture
def engine2(make_engine: Callable[..., Engine]) -> Engine:
    engine = make_engine()
    engine.dispatch("hello", {"protocol_version": 2, "worker": "pytest"})
    return engine


def _sampler(engine: Engine, seed: int | None) -> str:
    """The base model (None) or an adapter trained one step from `seed`."""
    if seed is None:
        return engine.dispatch("load_sampler", {"base_model": engine.base.name, "weights": None})["sampler"]
    handle = create(engine, seed=seed)
    batch = pass_input([sequence_datum([3, 1, 4, 1, 5, 9, 2, 6, 5])])
    handle = engine.dispatch("forward_backward", {"state": handle, "input": batch})["state"]["handle"]
    handle = engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 0.05}})["state"]["handle"]
    weights = engine.dispatch("export_weights", {"state": handle, "kind": "sampler"})["weights"]
    return engine.dispatch("load_sampler", {"base_model": engine.base.name, "weights": weights})["sampler"]


def _request(seed: int, num_samples: int = 1, prompt: list[int] = PROMPT) -> dict[str, Any]:
    target = np.asarray([[(5 * r) % 256, -1] for r in range(len(prompt) - 1)], dtype=np.int32)
    return {
        "prompt": encoded(prompt),
        "num_samples": num_samples,
        "sampling_params": {"max_tokens": MAX_TOKENS, "temperature": 0.9, "top_p": 0.95, "seed": seed},
        "prompt_logprobs": True,
        "topk_sample_logprobs": 3,
        "prompt_alt_tokens_k": 2,
        "target_prompt_logprobs": target,
    }


def _drain(engine: Engine, until: Callable[[dict[Any, Any]], bool] | None = None) -> dict[Any, Any]:
    answers: dict[Any, Any] = {}
    while engine.decoder.busy and (until is None or not until(answers)):
        for key, outcome in engine.decoder.step():
            answers[key] = outcome
    return answers


def _run(engine: Engine, calls: dict[Any, dict[str, Any]]) -> dict[Any, Any]:
    for key, args in calls.items():
        engine.submit_sample(key, args)
    return _drain(engine)


def _same(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every answered field, bit for bit (logprobs as float32 bytes)."""
    assert set(got) == set(expected)
    for key in got:
        if key != "sequences":
            assert got[key] == expected[key], key
    for a, b in zip(got["sequences"], expected["sequences"], strict=True):
        assert a["stop_reason"] == b["stop_reason"]
        assert a["tokens"].tolist() == b["tokens"].tolist()
        assert a["logprobs"].tobytes() == b["logprobs"].tobytes()
        assert a["topk_logprobs"] == b["topk_logprobs"]


def test_a_call_answers_the_same_bits_alone_in_a_batch_and_among_other_adapters(engine2: Engine) -> None:
    samplers = [_sampler(engine2, seed) for seed in (None, 1, 2, 3)]
    subject = {"sampler": samplers[1], "request": _request(7, num_samples=2)}
    alone = _run(engine2, {"subject": subject})["subject"]
    assert alone["finished"] and len(alone["sequences"]) == 2
    # 32 calls of the subject's adapter, other seeds and prompt lengths.
    batch = {i: {"sampler": samplers[1], "request": _request(100 + i, prompt=PROMPT[: 3 + i % 5])} for i in range(31)}
    _same(_run(engine2, {**batch, "subject": subject})["subject"], alone)
    # Mixed adapters (and the base model) in the same steps.
    mixed = {i: {"sampler": samplers[i % 4], "request": _request(200 + i)} for i in range(15)}
    answers = _run(engine2, {**mixed, "subject": subject})
    _same(answers["subject"], alone)
    # Each call equals itself alone, whatever adapter.
    for i in (0, 2, 3):
        _same(answers[i], _run(engine2, {i: mixed[i]})[i])


def test_rows_over_several_forwards_of_a_step_answer_their_bits_alone(make_engine: Callable[..., Engine]) -> None:
    """More live rows than `decode_rows`: a step runs several forwards of several tiles (the last of
    fewer); adapters' rows span blocks."""
    engine = make_engine(decode_rows=24, decode_tile_rows=8)
    engine.dispatch("hello", {"protocol_version": 2, "worker": "pytest"})
    samplers = [_sampler(engine, seed) for seed in (None, 1, 2)]
    calls = {i: {"sampler": samplers[i % 3], "request": _request(400 + i, num_samples=1 + i % 2)} for i in range(25)}
    answers = _run(engine, calls)
    for i in (0, 7, 13, 24):
        _same(answers[i], _run(engine, {i: calls[i]})[i])


def test_a_step_runs_the_tiles_its_rows_fill(make_engine: Callable[..., Engine]) -> None:
    """3 rows run as one tile of 8, 9 rows as two, 40 rows as a forward of 24 and one of 16 (row_tiles.py)."""
    engine = make_engine(decode_rows=24, decode_tile_rows=8)
    engine.dispatch("hello", {"protocol_version": 2, "worker": "pytest"})
    sampler = _sampler(engine, None)
    widths: list[int] = []
    embed = engine.pool.base.model.get_input_embeddings()
    hook = embed.register_forward_pre_hook(lambda _module, inputs: widths.append(inputs[0].shape[0]))
    try:
        for calls, expected in ((3, [8]), (9, [16]), (40, [24, 16])):
            for i in range(calls):
                engine.submit_sample(i, {"sampler": sampler, "request": _request(500 + i)})
            engine.decoder.step()  # admission (prompt forwards) and the first decode step
            widths.clear()
            engine.decoder.step()
            assert widths == expected, calls
            _drain(engine)
    finally:
        hook.remove()


def test_calls_of_one_prompt_share_its_forward_and_each_answers_its_bits_alone(engine2: Engine) -> None:
    """An RL group: calls of one prompt on one sampler, admitted together, run the prompt once."""
    sampler = _sampler(engine2, 1)
    group = {i: {"sampler": sampler, "request": _request(300 + i)} for i in range(6)}
    answers = _run(engine2, group)
    for i in (0, 3, 5):
        _same(answers[i], _run(engine2, {i: group[i]})[i])


def test_a_call_joining_a_running_batch_answers_its_bits_alone(engine2: Engine) -> None:
    sampler = _sampler(engine2, 5)
    subject = {"sampler": sampler, "request": _request(9)}
    alone = _run(engine2, {"subject": subject})["subject"]
    for i in range(6):
        engine2.submit_sample(i, {"sampler": sampler, "request": _request(300 + i)})
    for _ in range(5):
        engine2.decoder.step()
    engine2.submit_sample("subject", subject)
    assert engine2.decoder.busy and len(engine2.decoder.live) == 6
    _same(_drain(engine2)["subject"], alone)


def test_a_stopped_call_answers_its_tokens_so_far_and_resumes_exactly(engine2: Engine) -> None:
    sampler = _sampler(engine2, 4)
    subject = {"sampler": sampler, "request": _request(11, num_samples=3)}
    alone = _run(engine2, {"subject": subject})["subject"]
    for i in range(4):
        engine2.submit_sample(i, {"sampler": sampler, "request": _request(400 + i)})
    engine2.submit_sample("subject", subject)
    for _ in range(7):
        engine2.decoder.step()
    assert engine2.dispatch("stop_sample", {"call": 1})["stopped"] is True
    engine2.decoder.stop("subject")
    answers = engine2.decoder.step()
    stopped = dict(answers)["subject"]
    # At the step boundary: the tokens so far, unfinished; the other calls still run.
    assert stopped["finished"] is False and 1 in dict(answers)
    assert all(0 < len(s["tokens"]) < MAX_TOKENS for s in stopped["sequences"])
    assert engine2.decoder.busy
    resume = [{"tokens": s["tokens"], "logprobs": s["logprobs"]} for s in stopped["sequences"]]
    resumed = _run(engine2, {"again": {**subject, "resume": resume}})["again"]
    _same(resumed, alone)


def test_calls_beyond_the_kv_budget_wait_and_then_run(make_engine: Callable[..., Engine]) -> None:
    probe = make_engine()
    one_call = (len(PROMPT) + MAX_TOKENS) * kv_bytes_per_position(probe.pool)
    engine = make_engine(kv_budget_bytes=2 * one_call)
    engine.dispatch("hello", {"protocol_version": 2, "worker": "pytest"})
    sampler = _sampler(engine, None)
    for i in range(5):
        engine.submit_sample(i, {"sampler": sampler, "request": _request(500 + i)})
    engine.decoder.step()
    assert len(engine.decoder.live) == 2 and len(engine.decoder.waiting) == 3
    assert 0 < engine.decoder.kv_bytes <= engine.decoder.kv_budget_bytes
    answers = _drain(engine)
    assert sorted(answers) == list(range(5)) and all(a["finished"] for a in answers.values())
    # The arena is given back once no call holds a slot.
    assert engine.decoder.kv_bytes == 0
    _same(answers[4], _run(engine, {4: {"sampler": sampler, "request": _request(504)}})[4])
    # A call larger than the whole budget runs alone rather than never.
    big = {"sampler": sampler, "request": _request(600, num_samples=4)}
    assert _run(engine, {"big": big})["big"]["finished"]


def test_the_version_2_server_answers_by_id_and_stops_a_running_call(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()
    sampler = _sampler(engine, None)
    engine.greeted = False
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    inbound = os.fdopen(write_in, "wb")
    outbound = os.fdopen(read_out, "rb")
    server = threading.Thread(target=serve, args=(engine, os.fdopen(read_in, "rb"), os.fdopen(write_out, "wb")))
    server.start()

    def send(request_id: int, op: str, args: dict[str, Any]) -> None:
        encoder = Encoder()
        encoded_args = encode_value(args, encoder)
        write_frame(inbound, Frame({"id": request_id, "op": op, "args": encoded_args}, encoder.buffers))

    def receive() -> dict[str, Any]:
        frame = read_frame(outbound)
        assert frame is not None
        return frame.header

    send(1, "hello", {"protocol_version": 2, "worker": "pytest"})
    assert receive()["result"]["protocol_version"] == 2
    long_request = _request(1)
    long_request["sampling_params"]["max_tokens"] = 1500
    send(2, "sample", ({"sampler": sampler, "request": long_request}))
    send(3, "sample", ({"sampler": sampler, "request": _request(2)}))
    send(4, "ping", {})
    # The ping and the short call answer before the long one.
    assert receive()["id"] == 4
    assert receive()["id"] == 3
    send(5, "stop_sample", {"call": 2})
    header = receive()
    assert header["id"] == 5 and header["result"]["stopped"] is True
    header = receive()
    assert header["id"] == 2 and header["result"]["finished"] is False
    send(6, "shutdown", {})
    assert receive()["id"] == 6
    server.join(timeout=30)
    assert not server.is_alive()
