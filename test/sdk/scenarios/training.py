"""Training through the SDK: several models at once, and forward without a gradient effect."""

from checks import Checks, batch, logprobs_of, loss_of, max_difference, new_model, train_step, ADAM

checks = Checks()

STEPS = 10


@checks.check
def several_models_train_concurrently():
    """Three models of different ranks, their steps submitted interleaved before any result is read."""
    models = [new_model(rank=rank, seed=rank) for rank in (4, 8, 16)]
    data = [batch(text) for text in (b"the cat sat on the mat. ", b"a dog ran in the fog. ", b"la la la. ")]
    losses = [[] for _ in models]
    for _ in range(STEPS):
        fwd_bwd = [model.forward_backward(d, "cross_entropy") for model, d in zip(models, data)]
        optim = [model.optim_step(ADAM) for model in models]
        for history, future in zip(losses, fwd_bwd):
            history.append(loss_of(future.result()))
        for future in optim:
            future.result()
    for history in losses:
        assert history[-1] < history[0] * 0.7, f"loss did not fall: {history}"
    return {"model_ids": [model.model_id for model in models], "losses": losses}


@checks.check
def forward_has_no_gradient_effect():
    """Two identical models take the same step; one also runs forward between its forward_backward
    and its optim_step. Gradients from that forward would change its step; none may."""
    data = batch()
    with_forward, without_forward = new_model(seed=7), new_model(seed=7)
    before = logprobs_of(with_forward.forward(data, "cross_entropy").result())
    fwd_bwd = with_forward.forward_backward(data, "cross_entropy").result()
    after_fwd_bwd = logprobs_of(with_forward.forward(data, "cross_entropy").result())
    with_forward.optim_step(ADAM).result()
    train_step(without_forward, data)
    stepped_with = logprobs_of(with_forward.forward(data, "cross_entropy").result())
    stepped_without = logprobs_of(without_forward.forward(data, "cross_entropy").result())
    return {
        "lengths": [len(row) for row in before],
        "expected_lengths": [len(datum.model_input.to_ints()) for datum in data],
        "forward_vs_forward_backward": max_difference(before, logprobs_of(fwd_bwd)),
        "forward_after_forward_backward": max_difference(before, after_fwd_bwd),
        "stepped_with_vs_without_forward": max_difference(stepped_with, stepped_without),
        "step_moved_logprobs": max_difference(before, stepped_with),
        "loss": loss_of(fwd_bwd),
    }


if __name__ == "__main__":
    checks.run()
