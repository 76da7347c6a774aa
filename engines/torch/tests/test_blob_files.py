"""Blobs as files (docs/engine-protocol.md, "Blobs as files"): `hello` announces the feature; the `path`
forms of serialize_state / export_weights write exactly the bytes the `$bytes` forms answer, with their
size and SHA-256; deserialize_state / import_weights / load_sampler read a file as they read bytes."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
import torch
from conftest import create, pass_input, sequence_datum

from tinker_engine.engine import Engine
from tinker_engine.errors import InfrastructureError, ProtocolError
from tinker_engine.tensorfile import read_safetensors_from, write_safetensors

TOKENS = [9, 8, 7, 6, 5, 4, 3, 2]


def _trained(engine: Engine, with_grad: bool = True) -> str:
    handle = create(engine, rank=3, seed=4)
    step = {"state": handle, "input": pass_input([sequence_datum(TOKENS)])}
    handle = engine.dispatch("forward_backward", step)["state"]["handle"]
    handle = engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 0.05}})["state"]["handle"]
    if with_grad:
        step = {"state": handle, "input": pass_input([sequence_datum(TOKENS)])}
        handle = engine.dispatch("forward_backward", step)["state"]["handle"]
    return handle


def _file_answer(path: Path) -> dict[str, object]:
    data = path.read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_hello_announces_blob_files(make_engine) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine()
    assert "blob_files" in engine.hello({"protocol_version": 1})["features"]


def test_serialize_state_to_a_path_writes_the_bytes_form(engine: Engine, tmp_path: Path) -> None:
    handle = _trained(engine)
    data = engine.dispatch("serialize_state", {"state": handle})["bytes"]
    path = tmp_path / "state.bin"
    answer = engine.dispatch("serialize_state", {"state": handle, "path": str(path)})
    assert path.read_bytes() == data
    assert answer == _file_answer(path) == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # Read back from the file: the same state, and the handle that serialized it is untouched.
    restored = engine.dispatch("deserialize_state", {"path": str(path)})["state"]
    assert restored["weights_version"] == 1
    assert engine.dispatch("serialize_state", {"state": restored["handle"]})["bytes"] == data
    assert engine.dispatch("serialize_state", {"state": handle})["bytes"] == data


@pytest.mark.parametrize("kind", ["training", "sampler"])
def test_export_weights_to_a_path_writes_the_bytes_form(engine: Engine, tmp_path: Path, kind: str) -> None:
    handle = _trained(engine, with_grad=False)
    data = engine.dispatch("export_weights", {"state": handle, "kind": kind})["weights"]
    path = tmp_path / "weights.tar"
    answer = engine.dispatch("export_weights", {"state": handle, "kind": kind, "path": str(path)})
    assert path.read_bytes() == data and answer == _file_answer(path)
    with tarfile.open(path) as tar:
        names = sorted(tar.getnames())
    optimizer = ["optimizer.safetensors"] if kind == "training" else []
    assert names == sorted(["adapter_config.json", "adapter_model.safetensors", "checkpoint_complete", *optimizer])


def test_import_weights_and_load_sampler_read_a_file_as_bytes(engine: Engine, tmp_path: Path) -> None:
    source = _trained(engine, with_grad=False)
    path = tmp_path / "training.tar"
    engine.dispatch("export_weights", {"state": source, "kind": "training", "path": str(path)})
    by_bytes = engine.dispatch(
        "import_weights", {"state": create(engine, rank=3, seed=7), "weights": path.read_bytes(), "optimizer": True}
    )["state"]["handle"]
    by_file = engine.dispatch(
        "import_weights", {"state": create(engine, rank=3, seed=8), "path": str(path), "optimizer": True}
    )["state"]["handle"]
    assert (
        engine.dispatch("serialize_state", {"state": by_file})["bytes"]
        == engine.dispatch("serialize_state", {"state": by_bytes})["bytes"]
    )
    sampler_path = tmp_path / "sampler.tar"
    engine.dispatch("export_weights", {"state": source, "kind": "sampler", "path": str(sampler_path)})
    load = {"base_model": engine.base.name, "weights": None, "path": str(sampler_path)}
    sampler = engine.dispatch("load_sampler", load)
    adapter = engine.samplers[sampler["sampler"]].adapter
    assert adapter is not None
    for key, value in engine.states[source].weights.items():
        torch.testing.assert_close(adapter.weights[key], value.detach().cpu(), rtol=0, atol=0)


def test_a_bad_path_is_refused(engine: Engine, tmp_path: Path) -> None:
    handle = create(engine)
    with pytest.raises(ProtocolError, match="absolute"):
        engine.dispatch("serialize_state", {"state": handle, "path": "relative/state.bin"})
    with pytest.raises(InfrastructureError, match="cannot read"):
        engine.dispatch("deserialize_state", {"path": str(tmp_path / "missing.bin")})
    with pytest.raises(InfrastructureError, match="cannot write"):
        engine.dispatch("serialize_state", {"state": handle, "path": str(tmp_path / "no" / "such" / "dir")})
    not_a_state = tmp_path / "junk.bin"
    not_a_state.write_bytes(b"not a state at all")
    with pytest.raises(InfrastructureError, match="unreadable"):
        engine.dispatch("deserialize_state", {"path": str(not_a_state)})


def test_safetensors_stream_round_trip_matches_the_library() -> None:
    from safetensors.torch import load as load_safetensors

    tensors = {
        "b": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "a": torch.tensor([1, 2], dtype=torch.int64),
        "empty": torch.zeros(0, 4),
        "half": torch.ones(3, dtype=torch.bfloat16),
    }
    data = write_safetensors(tensors, metadata={"format": "pt"})
    theirs = load_safetensors(data)
    ours, metadata = read_safetensors_from(io.BytesIO(data))
    assert metadata == {"format": "pt"} and sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        torch.testing.assert_close(ours[key], value, rtol=0, atol=0)
