"""The official SDK on the torch engine with a model whose state is larger than one request body of the
local S3 (11 MiB): a random Llama of hidden 512 and 4 layers (TINKER_BASE_MODEL) at LoRA rank 32, a
20 MB state (16 bytes per trainable parameter). The worker keeps it resident between steps (S1) and
writes it in parts only as snapshots and checkpoints (S3): it trains, saves its state, and a client
created from that state takes the saved model's next step."""

import os

from tinker import types

from checks import Checks, logprobs_of, max_difference, next_byte_datum, service
from checks import train_step as sdk_train_step

checks = Checks()

BASE_MODEL = os.environ["TINKER_BASE_MODEL"]
RANK = int(os.environ.get("TINKER_LORA_RANK", "32"))
ADAM = types.AdamParams(learning_rate=0.005)
DATA = [next_byte_datum(b"the cat sat on the mat. a dog ran in the fog. ")]


def train_step(client) -> float:
    return sdk_train_step(client, DATA, ADAM)


def forward_logprobs(client) -> list[list[float]]:
    return logprobs_of(client.forward(DATA, "cross_entropy").result())


@checks.check
def large_state_trains_saves_and_restores():
    model = service().create_lora_training_client(base_model=BASE_MODEL, rank=RANK, seed=7)
    losses = [train_step(model) for _ in range(3)]
    at_save = forward_logprobs(model)
    path = model.save_state("large-state").result().path
    restored = service().create_training_client_from_state_with_optimizer(path)
    restored_logprobs = max_difference(forward_logprobs(restored), at_save)
    train_step(model)
    train_step(restored)
    return {
        "model_id": model.model_id,
        "path": path,
        "losses": losses,
        "restored": restored_logprobs,
        "next_step": max_difference(forward_logprobs(model), forward_logprobs(restored)),
    }


if __name__ == "__main__":
    checks.run()
