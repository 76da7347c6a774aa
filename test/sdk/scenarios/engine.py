"""The official SDK on the torch engine (engines/torch) through the whole local stack, as
`npm start -- --engine torch` runs it: a real Hugging Face model (the tiny random Llama, named by its
folder, TINKER_BASE_MODEL) trains with its loss falling, saves and restores its state, samples, takes a
forward_backward_custom step and an RL step (importance_sampling on the sampler's own logprobs)."""

import functools
import os

from tinker import types

from checks import Checks, finite, logprobs_of, loss_of, max_difference, service

checks = Checks()

BASE_MODEL = os.environ["TINKER_BASE_MODEL"]
ADAM = types.AdamParams(learning_rate=0.01)
TEXTS = [b"the cat sat on the mat. ", b"a dog ran in the fog. "]
PROMPT = types.ModelInput.from_ints(list(b"the "))


def new_model(seed: int = 1, rank: int = 8):
    return service().create_lora_training_client(base_model=BASE_MODEL, rank=rank, seed=seed)


def datum(text: bytes) -> types.Datum:
    """The tiny model's tokenizer is byte-level: a token per byte."""
    tokens = list(text)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


DATA = [datum(text) for text in TEXTS]


def train_step(client) -> float:
    fwd_bwd = client.forward_backward(DATA, "cross_entropy")
    optim = client.optim_step(ADAM)
    loss = loss_of(fwd_bwd.result())
    optim.result()
    return loss


def forward_logprobs(client) -> list[list[float]]:
    return logprobs_of(client.forward(DATA, "cross_entropy").result())


@functools.cache
def trained():
    """A model trained eight steps, its losses, and a sampling client on its weights."""
    model = new_model(seed=3)
    losses = [train_step(model) for _ in range(8)]
    return model, losses, model.save_weights_and_get_sampling_client()


@checks.check
def training_loss_falls():
    model, losses, _ = trained()
    info = model.get_info()
    return {"losses": losses, "model_name": info.model_data.model_name}


@checks.check
def save_state_and_restore():
    """save_state, train on, load_state: the saved logprobs come back; a client created from the state
    with its optimizer takes exactly the saved model's next step."""
    model = new_model(seed=5)
    for _ in range(2):
        train_step(model)
    at_save = forward_logprobs(model)
    path = model.save_state("engine-two-steps").result().path
    train_step(model)
    moved = max_difference(forward_logprobs(model), at_save)
    model.load_state_with_optimizer(path).result()
    reloaded = max_difference(forward_logprobs(model), at_save)
    restored = service().create_training_client_from_state_with_optimizer(path)
    restored_logprobs = max_difference(forward_logprobs(restored), at_save)
    train_step(model)
    train_step(restored)
    return {
        "path": path,
        "moved_by_training": moved,
        "reloaded": reloaded,
        "restored": restored_logprobs,
        "next_step": max_difference(forward_logprobs(model), forward_logprobs(restored)),
    }


@checks.check
def sampling():
    """Seeded samples repeat; max_tokens bounds them; logprobs of the sampled tokens and of the prompt
    come back finite; the trained model's sampler and the base model's both sample."""
    _, _, sampler = trained()
    params = types.SamplingParams(max_tokens=8, seed=17, temperature=1.0)
    first = sampler.sample(PROMPT, 3, params, include_prompt_logprobs=True).result()
    again = sampler.sample(PROMPT, 3, params).result()
    base = service().create_sampling_client(base_model=BASE_MODEL)
    from_base = base.sample(PROMPT, 2, types.SamplingParams(max_tokens=4, seed=1)).result()
    return {
        "tokens": [list(s.tokens) for s in first.sequences],
        "again": [list(s.tokens) for s in again.sequences],
        "stop_reasons": [str(s.stop_reason) for s in first.sequences],
        "logprobs_finite": all(finite(s.logprobs) for s in first.sequences),
        "logprob_counts": [len(s.logprobs) for s in first.sequences],
        "prompt_logprobs": len(first.prompt_logprobs or []),
        "base_lengths": [len(s.tokens) for s in from_base.sequences],
    }


@checks.check
def forward_backward_custom_equals_cross_entropy():
    """Twin models: a custom loss equal to cross-entropy, through forward_backward_custom, against the
    built-in cross_entropy: the same loss and the same weights after a step."""
    try:
        import torch
    except ImportError as error:
        why = os.environ.get("SDK_TORCH_MISSING") or str(error)
        return {"skipped": f"forward_backward_custom needs torch on the client, which is not importable: {why}"}

    def custom_cross_entropy(data, logprobs_list):
        loss = sum(
            -(logprobs * d.loss_fn_inputs["weights"].to_torch().to(logprobs.dtype)).sum()
            for d, logprobs in zip(data, logprobs_list)
        )
        return loss, {"custom_loss": float(loss.detach())}

    custom_model, builtin_model = new_model(seed=21), new_model(seed=21)
    before = forward_logprobs(builtin_model)
    custom = custom_model.forward_backward_custom(DATA, custom_cross_entropy).result()
    builtin = builtin_model.forward_backward(DATA, "cross_entropy").result()
    custom_model.optim_step(ADAM).result()
    builtin_model.optim_step(ADAM).result()
    return {
        "torch": torch.__version__,
        "custom_loss_sum": loss_of(custom),
        "builtin_loss_sum": loss_of(builtin),
        "next_step_difference": max_difference(forward_logprobs(custom_model), forward_logprobs(builtin_model)),
        "step_moved_logprobs": max_difference(before, forward_logprobs(builtin_model)),
    }


@checks.check
def rl_step_with_sampler_logprobs():
    """One RL step as a researcher writes it: sample from the current weights, reward each sequence,
    and train with importance_sampling on the sampler's logprobs. The sampler's logprobs are the
    trainer's (same weights), so the loss is -sum(advantages) and every ratio is 1."""
    model = new_model(seed=9)
    train_step(model)
    sampler = model.save_weights_and_get_sampling_client()
    prompt = list(b"the ")
    response = sampler.sample(
        types.ModelInput.from_ints(prompt), 4, types.SamplingParams(max_tokens=6, seed=5, temperature=1.0)
    ).result()
    rewards = [sum(1.0 for t in s.tokens if t in b"aeiou ") for s in response.sequences]
    mean = sum(rewards) / len(rewards)
    data, advantage_sum = [], 0.0
    for sequence, reward in zip(response.sequences, rewards):
        tokens = list(sequence.tokens)
        advantage = reward - mean
        padding = len(prompt) - 1
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(prompt + tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": prompt[1:] + tokens,
                    "logprobs": [0.0] * padding + [float(x) for x in sequence.logprobs],
                    "advantages": [0.0] * padding + [advantage] * len(tokens),
                },
            )
        )
        advantage_sum += advantage * len(tokens)
    forwarded = logprobs_of(model.forward(data, "importance_sampling").result())
    sampler_vs_trainer = max(
        abs(f - s)
        for row, sequence in zip(forwarded, response.sequences)
        for f, s in zip(row[len(prompt) - 1 :], sequence.logprobs)
    )
    result = model.forward_backward(data, "importance_sampling").result()
    model.optim_step(ADAM).result()
    return {
        "rewards": rewards,
        "loss_sum": loss_of(result),
        "expected_loss_sum": -advantage_sum,
        "sampler_vs_trainer_logprobs": sampler_vs_trainer,
        "metrics": {key: float(value) for key, value in result.metrics.items()},
    }


if __name__ == "__main__":
    checks.run()
