"""What every SDK scenario shares: the list of checks it runs, its one-line JSON report, and data.

A scenario script registers checks with `@checks.check`; each returns a dict of observations (and
asserts where Python is the natural place). `checks.run()` runs them in order, catching each one's
failure so the others still run, and prints {"sdk": ..., "checks": {name: {"observed": ...} or
{"error": ..., "scenario_frames": ..., "traceback": ...}}} as the last stdout line, which test/sdk/scenario.ts reads.
"""

import functools
import json
import math
import os
import signal
import sys
import traceback

import tinker
from tinker import types

# SIGALRM's default action ends the process: an orphaned scenario (its test process gone) does not
# wait out the SDK's minutes of retries against a stopped server.
signal.alarm(int(os.environ.get("SCENARIO_DEADLINE_SECONDS", "0")))

BASE_MODEL = "reference/byte-lm"

# The reference model's training converges quickly at this rate (the demo uses it too).
ADAM = types.AdamParams(learning_rate=0.05)

TEXTS = [b"the cat sat on the mat. ", b"a dog ran in the fog. ", b"la la la, sing along. "]


class Checks:
    def __init__(self):
        self._checks = []

    def check(self, fn):
        self._checks.append(fn)
        return fn

    def run(self):
        outcomes = {}
        for fn in self._checks:
            try:
                observed = fn()
                json.dumps(observed, allow_nan=False, default=str)  # a NaN fails its check, not the report
                outcomes[fn.__name__] = {"observed": observed}
            except BaseException as error:  # noqa: BLE001 - every failure is reported, none stops the rest
                outcomes[fn.__name__] = {
                    "error": f"{type(error).__name__}: {error}",
                    "scenario_frames": _scenario_frames(error),
                    "traceback": traceback.format_exc(),
                }
        print(json.dumps({"sdk": tinker.__version__, "checks": outcomes}, allow_nan=False, default=str))
        sys.stdout.flush()
        sys.stderr.flush()
        # The SDK's background threads can keep the interpreter alive after main returns.
        os._exit(0)


def _scenario_frames(error: BaseException) -> str:
    """The failing call's frames in the scenario scripts, which a traceback's tail (the SDK's
    innermost frames) leaves out."""
    here = os.path.dirname(os.path.abspath(__file__))
    # The first frame is Checks.run itself.
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)[1:] if frame.filename.startswith(here)]
    return "".join(traceback.format_list(frames))


@functools.cache
def service(api_key_variable: str = "TINKER_API_KEY") -> tinker.ServiceClient:
    """One ServiceClient per tenant (the SDK reads TINKER_BASE_URL itself)."""
    return tinker.ServiceClient(api_key=os.environ[api_key_variable])


def other_tenant() -> tinker.ServiceClient:
    return service("TINKER_OTHER_API_KEY")


def new_model(rank: int = 8, seed: int = 1):
    return service().create_lora_training_client(base_model=BASE_MODEL, rank=rank, seed=seed)


def next_byte_datum(text: bytes) -> types.Datum:
    """Predict each byte from the ones before it (tokens are bytes for the reference model)."""
    tokens = list(text)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


def batch(*texts: bytes) -> list[types.Datum]:
    return [next_byte_datum(text) for text in texts or TEXTS]


def logprobs_of(output: types.ForwardBackwardOutput) -> list[list[float]]:
    return [[float(x) for x in out["logprobs"].tolist()] for out in output.loss_fn_outputs]


def loss_of(output: types.ForwardBackwardOutput) -> float:
    return float(output.metrics["loss:sum"])


def train_step(client, data: list[types.Datum], adam: types.AdamParams = ADAM) -> float:
    """One forward_backward and optim_step; the loss before the step."""
    fwd_bwd = client.forward_backward(data, "cross_entropy")
    optim = client.optim_step(adam)
    loss = loss_of(fwd_bwd.result())
    optim.result()
    return loss


def max_difference(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(row) for row in a] == [len(row) for row in b], "logprobs of different shapes"
    return max((abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)), default=0.0)


def finite(values) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)
