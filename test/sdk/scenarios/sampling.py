"""Sampling through the SDK, from the base model, a trained model's weights and a saved sampler checkpoint."""

import functools

import tinker
from tinker import types

from checks import BASE_MODEL, Checks, batch, finite, logprobs_of, new_model, service, train_step

checks = Checks()

PROMPT = types.ModelInput.from_ints(list(b"la la "))


def params(**overrides) -> types.SamplingParams:
    return types.SamplingParams(**{"max_tokens": 12, "seed": 11, "temperature": 1.0, **overrides})


def tokens_of(response: types.SampleResponse) -> list[list[int]]:
    return [list(sequence.tokens) for sequence in response.sequences]


@functools.cache
def base_sampler():
    return service().create_sampling_client(base_model=BASE_MODEL)


@functools.cache
def trained():
    """A model trained a few steps on "la la la", and a sampling client on its current weights."""
    model = new_model(seed=5)
    for _ in range(4):
        train_step(model, batch(b"la la la la la la. "))
    return model, model.save_weights_and_get_sampling_client()


@checks.check
def several_samples_and_seeds():
    sampler = base_sampler()
    first = sampler.sample(PROMPT, 3, params()).result()
    again = sampler.sample(PROMPT, 3, params()).result()
    other_seed = sampler.sample(PROMPT, 3, params(seed=12)).result()
    sequences = first.sequences
    assert len(sequences) == 3
    assert all(len(s.tokens) == 12 and all(0 <= t < 256 for t in s.tokens) for s in sequences)
    assert all(s.logprobs is not None and len(s.logprobs) == len(s.tokens) and finite(s.logprobs) for s in sequences)
    return {
        "tokens": tokens_of(first),
        "same_seed_same_tokens": tokens_of(again) == tokens_of(first),
        "other_seed_differs": tokens_of(other_seed) != tokens_of(first),
        "samples_differ_from_each_other": len({tuple(t) for t in tokens_of(first)}) > 1,
        "stop_reasons": [s.stop_reason for s in sequences],
    }


@checks.check
def stop_token_ends_the_sequence():
    """Sampling is keyed by the seed, so the same call with a stop token cut at its first occurrence."""
    sampler = base_sampler()
    unstopped = list(sampler.sample(PROMPT, 1, params(max_tokens=16)).result().sequences[0].tokens)
    # The first token from the fourth on not seen earlier, so the stop can only fire there.
    cut = next(i for i in range(3, len(unstopped)) if unstopped[i] not in unstopped[:i])
    stopped = sampler.sample(PROMPT, 1, params(max_tokens=16, stop=[unstopped[cut]])).result().sequences[0]
    return {
        "stop_token": unstopped[cut],
        "expected_tokens": unstopped[: cut + 1],
        "tokens": list(stopped.tokens),
        "stop_reason": stopped.stop_reason,
    }


@checks.check
def max_tokens_ends_with_length():
    sequence = base_sampler().sample(PROMPT, 1, params(max_tokens=5)).result().sequences[0]
    return {"tokens": len(sequence.tokens), "stop_reason": sequence.stop_reason}


@checks.check
def prompt_logprobs_and_top_k():
    response = base_sampler().sample(
        PROMPT, 1, params(max_tokens=1), include_prompt_logprobs=True, topk_prompt_logprobs=3
    ).result()
    prompt_logprobs = response.prompt_logprobs
    topk = response.topk_prompt_logprobs
    prompt = PROMPT.to_ints()
    assert prompt_logprobs is not None and topk is not None
    # Each position's own token can score no higher than that position's best.
    for position in range(1, len(prompt)):
        assert prompt_logprobs[position] <= topk[position][0][1] + 1e-5, position
    return {
        "prompt_length": len(prompt),
        "prompt_logprobs": prompt_logprobs,
        "topk": [None if row is None else [[token, logprob] for token, logprob in row] for row in topk],
    }


@checks.check
def compute_logprobs_equals_forward():
    """The sampler's logprobs of a sequence are the training model's forward logprobs of it."""
    model, sampler = trained()
    sequence = list(b"la la la. ")
    computed = sampler.compute_logprobs(types.ModelInput.from_ints(sequence)).result()
    forwarded = logprobs_of(model.forward(batch(bytes(sequence)), "cross_entropy").result())[0]
    assert computed[0] is None, computed[:2]
    difference = max(abs(a - b) for a, b in zip(computed[1:], forwarded))
    return {"length": len(computed), "forward_length": len(forwarded), "max_difference": difference}


@checks.check
def sampler_checkpoint_samples_like_the_weights():
    """A named sampler checkpoint, opened by its path, samples exactly what its weights' client does."""
    model, sampler = trained()
    path = model.save_weights_for_sampler("sampler-after-four").result().path
    from_path = service().create_sampling_client(model_path=path)
    expected = tokens_of(sampler.sample(PROMPT, 2, params()).result())
    return {"path": path, "tokens": tokens_of(from_path.sample(PROMPT, 2, params()).result()), "expected": expected}


@checks.check
def sampler_checkpoint_path_is_a_sampler_path():
    """The path the SDK's own parser accepts: tinker://<run>/sampler_weights/<name>. Untrained, so
    every SDK version gets this far."""
    model = new_model(seed=5)
    path = model.save_weights_for_sampler("sampler-path-shape").result().path
    parsed = tinker.ParsedCheckpointTinkerPath.from_tinker_path(path)
    return {"path": path, "checkpoint_type": parsed.checkpoint_type, "training_run_id": parsed.training_run_id,
            "model_id": model.model_id}


@checks.check
def trained_sampler_prefers_its_training_text():
    """After training on "la la la", the model scores that text above the base model does."""
    _, sampler = trained()
    text = types.ModelInput.from_ints(list(b"la la la la. "))
    trained_logprobs = sampler.compute_logprobs(text).result()[1:]
    base_logprobs = base_sampler().compute_logprobs(text).result()[1:]
    return {"trained": sum(trained_logprobs), "base": sum(base_logprobs)}


if __name__ == "__main__":
    checks.run()
