"""PEFT export (G5): `PeftModel.from_pretrained` on the same base gives the engine's logits; import of
an export reproduces the state; a mismatched checkpoint is a user error with no effect."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import create, datum, pass_input, sequence_datum
from peft import PeftModel
from safetensors.torch import load as load_safetensors
from transformers import AutoModelForCausalLM

from tinker_engine.engine import Engine
from tinker_engine.errors import UserError

TOKENS = [9, 8, 7, 6, 5, 4, 3, 2]


def _trained(engine: Engine, steps: int = 2, **flags: bool) -> str:
    handle = create(engine, rank=3, seed=4, **flags)
    for _ in range(steps):
        handle = engine.dispatch("forward_backward", {"state": handle, "input": pass_input([sequence_datum(TOKENS)])})[
            "state"
        ]["handle"]
        handle = engine.dispatch("optim_step", {"state": handle, "params": {"learning_rate": 0.05}})["state"]["handle"]
    return handle


def _untar(data: bytes, folder: Path) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return files


def test_peft_loads_the_export_and_gives_the_engines_logits(engine: Engine, tmp_path: Path) -> None:
    handle = _trained(engine)
    files = _untar(engine.dispatch("export_weights", {"state": handle, "kind": "sampler"})["weights"], tmp_path)
    assert sorted(files) == ["adapter_config.json", "adapter_model.safetensors", "checkpoint_complete"]
    config = json.loads(files["adapter_config.json"])
    assert config["base_model_name_or_path"] == engine.base.name and config["r"] == 3
    base = AutoModelForCausalLM.from_pretrained(engine.base.name, local_files_only=True)
    model = PeftModel.from_pretrained(base, str(tmp_path)).eval()
    targets = np.tile(np.arange(256, dtype=np.int64), (len(TOKENS), 1))
    ours = engine.dispatch("forward", {"state": handle, "input": pass_input([datum(TOKENS, targets)])})["result"]
    with torch.no_grad():
        theirs = torch.log_softmax(model(torch.tensor([TOKENS])).logits[0], dim=-1).numpy()
    np.testing.assert_allclose(ours["loss_fn_outputs"][0]["logprobs"], theirs, rtol=1e-5, atol=1e-5)
    # The adapter does change the model: the base alone scores differently.
    with torch.no_grad(), model.disable_adapter():
        plain = torch.log_softmax(model(torch.tensor([TOKENS])).logits[0], dim=-1).numpy()
    assert np.abs(plain - theirs).max() > 1e-3


def test_train_flags_choose_the_adapted_modules(engine: Engine, tmp_path: Path) -> None:
    handle = create(engine, train_attn=False, train_mlp=True, train_unembed=False)
    files = _untar(engine.dispatch("export_weights", {"state": handle, "kind": "sampler"})["weights"], tmp_path)
    assert json.loads(files["adapter_config.json"])["target_modules"] == [
        "mlp.down_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
    ]
    names = load_safetensors(files["adapter_model.safetensors"])
    assert all(".mlp." in name for name in names) and len(names) == 2 * 3 * 2


def test_importing_a_training_export_reproduces_the_state(engine: Engine) -> None:
    source = _trained(engine)
    exported = engine.dispatch("export_weights", {"state": source, "kind": "training"})["weights"]
    assert engine.dispatch("export_weights", {"state": source, "kind": "training"})["weights"] == exported
    target = create(engine, rank=3, seed=99)
    target = engine.dispatch("import_weights", {"state": target, "weights": exported, "optimizer": True})["state"][
        "handle"
    ]
    a, b = engine.states[source], engine.states[target]
    assert b.adam_step == a.adam_step == 2 and b.grad is None
    for key in a.keys():
        torch.testing.assert_close(b.weights[key], a.weights[key], rtol=0, atol=0)
        torch.testing.assert_close(b.moment1[key], a.moment1[key], rtol=0, atol=0)  # type: ignore[index]
        torch.testing.assert_close(b.moment2[key], a.moment2[key], rtol=0, atol=0)  # type: ignore[index]
    # Without the optimizer the moments reset.
    fresh = create(engine, rank=3, seed=5)
    fresh = engine.dispatch("import_weights", {"state": fresh, "weights": exported, "optimizer": False})["state"][
        "handle"
    ]
    assert engine.states[fresh].moment1 is None and engine.states[fresh].adam_step == 0


def test_a_mismatched_checkpoint_is_a_user_error_with_no_effect(engine: Engine) -> None:
    exported = engine.dispatch("export_weights", {"state": _trained(engine, steps=1), "kind": "sampler"})["weights"]
    other = create(engine, rank=5)
    before = engine.dispatch("serialize_state", {"state": other})["bytes"]
    with pytest.raises(UserError, match="rank 3"):
        engine.dispatch("import_weights", {"state": other, "weights": exported, "optimizer": False})
    same = create(engine, rank=3)
    with pytest.raises(UserError) as raised:
        engine.dispatch("import_weights", {"state": same, "weights": exported, "optimizer": True})
    assert raised.value.field == "optimizer"
    assert engine.dispatch("serialize_state", {"state": other})["bytes"] == before


def test_serialized_states_round_trip(engine: Engine) -> None:
    handle = _trained(engine)
    handle = engine.dispatch("forward_backward", {"state": handle, "input": pass_input([sequence_datum(TOKENS)])})[
        "state"
    ]["handle"]
    data = engine.dispatch("serialize_state", {"state": handle})["bytes"]
    restored = engine.dispatch("deserialize_state", {"bytes": data})["state"]
    assert restored["weights_version"] == 2
    assert engine.dispatch("serialize_state", {"state": restored["handle"]})["bytes"] == data
    from tinker_engine.errors import InfrastructureError

    with pytest.raises(InfrastructureError):
        engine.dispatch("deserialize_state", {"bytes": b"not a state"})
