"""A whole protocol session through the real subprocess (`python -m tinker_engine`): handshake,
create_model, forward_backward, optim_step, sample, export, serialize/deserialize, user and
protocol errors, shutdown. Standard output carries frames only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinker_engine.protocol import Encoder, Frame, decode_value, read_frame, write_frame

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def _encode(value: Any, encoder: Encoder) -> Any:
    if isinstance(value, np.ndarray):
        return encoder.tensor(value)
    if isinstance(value, bytes):
        return encoder.bytes(value)
    if isinstance(value, dict):
        return {k: _encode(v, encoder) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v, encoder) for v in value]
    return value


class Client:
    def __init__(self, model_dir: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tinker_engine", "--base-model", model_dir, "--device", "cpu", "--threads", "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.next_id = 0

    def call(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        encoder = Encoder()
        header = {"id": self.next_id, "op": op, "args": _encode(args or {}, encoder)}
        assert self.process.stdin is not None and self.process.stdout is not None
        write_frame(self.process.stdin, Frame(header, encoder.buffers))
        reply = read_frame(self.process.stdout)
        assert reply is not None, "the engine closed its output"
        assert reply.header["id"] == self.next_id
        return decode_value({k: v for k, v in reply.header.items() if k != "buffers"}, reply.buffers)


def _datum(tokens: list[int]) -> dict[str, Any]:
    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": np.asarray(tokens[:-1], dtype=np.int32)}]},
        "loss_fn_inputs": {"target_tokens": np.asarray(tokens[1:], dtype=np.int64)},
    }


@pytest.fixture
def client(tiny_model_dir: str) -> Client:
    session = Client(tiny_model_dir)
    yield session  # type: ignore[misc]
    if session.process.poll() is None:
        session.process.kill()
    session.process.wait(timeout=30)
    for stream in (session.process.stdin, session.process.stdout, session.process.stderr):
        if stream is not None:
            stream.close()


def test_a_full_session(client: Client, tiny_model_dir: str) -> None:
    # One process serves the whole test: starting one costs seconds (importing torch and transformers).
    refused = client.call("hello", {"protocol_version": 99, "worker": "pytest"})
    assert refused["ok"] is False and refused["error"]["kind"] == "protocol"
    assert "protocol_version 99" in refused["error"]["message"] and "speaks 1" in refused["error"]["message"]

    hello = client.call("hello", {"protocol_version": 1, "worker": "pytest"})
    assert hello["ok"], hello
    assert hello["result"]["base_models"] == [
        {"name": tiny_model_dir, "tokenizer_id": tiny_model_dir, "vocab_size": 256, "max_context_length": 2048}
    ]
    assert hello["result"]["device"] == "cpu" and hello["result"]["dtype"] == "float32"
    assert client.call("ping")["ok"]

    created = client.call("create_model", {"base_model": tiny_model_dir, "lora_config": {"rank": 4, "seed": 1}})
    state = created["result"]["state"]
    assert state["weights_version"] == 0
    batch = {"loss_fn": "cross_entropy", "loss_fn_config": {}, "data": [_datum(list(range(40, 60)))]}
    losses = []
    for _ in range(3):
        step = client.call("forward_backward", {"state": state["handle"], "input": batch})
        assert step["ok"], step
        logprobs = step["result"]["result"]["loss_fn_outputs"][0]["logprobs"]
        assert logprobs.dtype == np.float32 and logprobs.shape == (19,)
        losses.append(step["result"]["result"]["metrics"]["loss:sum"])
        optim = client.call(
            "optim_step", {"state": step["result"]["state"]["handle"], "params": {"learning_rate": 0.02}}
        )
        state = optim["result"]["state"]
    assert losses[-1] < losses[0] and state["weights_version"] == 3

    bad = dict(batch, data=[_datum([1, 2, 4000])])
    refused = client.call("forward_backward", {"state": state["handle"], "input": bad})
    assert (
        refused["error"]["kind"] == "user"
        and refused["error"]["field"] == "data[0].loss_fn_inputs.target_tokens.data[1]"
    )
    assert client.call("forward", {"state": state["handle"], "input": batch})["ok"], (
        "a user error leaves the handle valid"
    )

    weights = client.call("export_weights", {"state": state["handle"], "kind": "sampler"})["result"]["weights"]
    sampler = client.call("load_sampler", {"base_model": tiny_model_dir, "weights": weights})["result"]["sampler"]
    request = {
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": np.asarray([40, 41, 42], dtype=np.int32)}]},
        "num_samples": 2,
        "sampling_params": {"max_tokens": 8, "temperature": 1.0, "seed": 3},
        "prompt_logprobs": True,
    }
    cut = client.call("sample", {"sampler": sampler, "request": request, "resume": None, "max_new_tokens": 3})["result"]
    assert cut["finished"] is False and all(s["stop_reason"] is None for s in cut["sequences"])
    resume = [{"tokens": s["tokens"], "logprobs": s["logprobs"]} for s in cut["sequences"]]
    done = client.call("sample", {"sampler": sampler, "request": request, "resume": resume, "max_new_tokens": None})[
        "result"
    ]
    whole = client.call("sample", {"sampler": sampler, "request": request, "resume": None, "max_new_tokens": None})[
        "result"
    ]
    assert done["finished"] and done["prompt_logprobs"][0] is None
    for a, b in zip(done["sequences"], whole["sequences"], strict=True):
        assert a["tokens"].dtype == np.int32 and a["tokens"].tolist() == b["tokens"].tolist()
        assert a["stop_reason"] == b["stop_reason"] == "length"

    saved = client.call("serialize_state", {"state": state["handle"]})["result"]["bytes"]
    restored = client.call("deserialize_state", {"bytes": saved})["result"]["state"]
    assert restored["weights_version"] == 3
    again = client.call("forward", {"state": restored["handle"], "input": batch})["result"]["result"]["metrics"]
    original = client.call("forward", {"state": state["handle"], "input": batch})["result"]["result"]["metrics"]
    assert again["loss:sum"] == original["loss:sum"]

    assert client.call("release", {"handles": [state["handle"], sampler]})["ok"]
    gone = client.call("forward", {"state": state["handle"], "input": batch})
    assert gone["error"]["kind"] == "protocol"
    assert client.call("shutdown")["ok"]
    assert client.process.wait(timeout=30) == 0
    assert client.process.stdout is not None and client.process.stdout.read() == b""
