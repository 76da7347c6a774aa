"""The five losses against the shared vectors the reference backend writes (test/support/
fixtures/loss-vectors.json, test/support/loss-vectors.ts): same inputs, same values, slopes d loss / d logprob,
`loss:mean` weights, ratios and clip flags within float32 tolerance (L1, G3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tinker_engine.inputs import PassDatum
from tinker_engine.losses import datum_terms, resolve_loss

VECTORS_FILE = Path(__file__).resolve().parents[3] / "test" / "support" / "fixtures" / "loss-vectors.json"
VECTORS = json.loads(VECTORS_FILE.read_text())["vectors"]


def _datum(vector: dict[str, Any]) -> PassDatum:
    shape = tuple(vector["target_shape"])
    rows = shape[0]
    return PassDatum(
        field="data[0]",
        tokens=torch.zeros(rows, dtype=torch.long),
        targets=torch.zeros((rows, int(np.prod(shape)) // rows), dtype=torch.long),
        target_shape=shape,
        float_inputs={
            name: torch.tensor(values, dtype=torch.float32).reshape(rows, -1)
            for name, values in vector["loss_fn_inputs"].items()
        },
    )


@pytest.mark.parametrize("vector", VECTORS, ids=[f"{v['loss_fn']}-{i}" for i, v in enumerate(VECTORS)])
def test_losses_match_the_reference_vectors(vector: dict[str, Any]) -> None:
    name, config = resolve_loss(vector["loss_fn"], vector["loss_fn_config"])
    datum = _datum(vector)
    rows = datum.targets.shape[0]
    learner = torch.tensor(vector["learner_logprobs"], dtype=torch.float32).reshape(rows, -1).requires_grad_(True)
    terms = datum_terms(name, config, datum, learner)
    terms.values.sum().backward()
    expected = vector["expected"]
    tolerance = {"rtol": 1e-5, "atol": 1e-6}
    np.testing.assert_allclose(terms.values.detach().reshape(-1).numpy(), expected["values"], **tolerance)
    assert learner.grad is not None
    np.testing.assert_allclose(learner.grad.reshape(-1).numpy(), expected["slopes"], **tolerance)
    np.testing.assert_allclose(terms.weights.reshape(-1).numpy(), expected["weights"], **tolerance)
    if expected["ratios"] is None:
        assert terms.ratio is None
    else:
        assert terms.ratio is not None
        np.testing.assert_allclose(terms.ratio.reshape(-1).numpy(), expected["ratios"], **tolerance)
    if expected["clipped"] is None:
        assert terms.clipped is None
    else:
        assert terms.clipped is not None
        assert terms.clipped.reshape(-1).tolist() == expected["clipped"]
