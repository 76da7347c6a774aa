"""Saving and restoring training state through the SDK: a restored model computes what the saved one did."""

import functools

from checks import Checks, batch, logprobs_of, max_difference, new_model, service, train_step

checks = Checks()

DATA = batch()


def forward_logprobs(client) -> list[list[float]]:
    return logprobs_of(client.forward(DATA, "cross_entropy").result())


@functools.cache
def saved():
    """A model trained two steps (so its Adam moments are not zero) and saved as `after-two-steps`."""
    model = new_model(seed=3)
    for _ in range(2):
        train_step(model, DATA)
    path = model.save_state("after-two-steps").result().path
    return model, path, forward_logprobs(model)


@checks.check
def save_state_returns_a_weights_path():
    """Untrained, so it needs nothing but the JSON endpoints every SDK version uses."""
    model = new_model(seed=3)
    path = model.save_state("untrained").result().path
    assert path.startswith("tinker://") and "/weights/" in path, path
    return {"path": path, "model_id": model.model_id}


@checks.check
def load_state_on_an_existing_client():
    """The saved model trains on, then loads its checkpoint back; a fresh model loads it too."""
    model, path, at_save = saved()
    train_step(model, DATA)
    moved = max_difference(forward_logprobs(model), at_save)
    model.load_state(path).result()
    reloaded = max_difference(forward_logprobs(model), at_save)
    fresh = new_model(seed=99)
    fresh.load_state(path).result()
    return {"moved_by_training": moved, "reloaded": reloaded, "fresh_client": max_difference(forward_logprobs(fresh), at_save)}


@checks.check
def load_state_with_optimizer_on_an_existing_client():
    """A fresh model that loads the checkpoint with its optimizer takes the step the saved model would."""
    model, path, _ = saved()
    # The reference: what the saved model computes one step after its save (it may have trained on).
    model.load_state_with_optimizer(path).result()
    reference_loss = train_step(model, DATA)
    reference = forward_logprobs(model)
    fresh = new_model(seed=99)
    fresh.load_state_with_optimizer(path).result()
    loss = train_step(fresh, DATA)
    return {"loss": loss, "reference_loss": reference_loss, "after_step": max_difference(forward_logprobs(fresh), reference)}


@checks.check
def create_training_client_from_state():
    _, path, at_save = saved()
    restored = service().create_training_client_from_state(path)
    return {"model_id": restored.model_id, "logprobs": max_difference(forward_logprobs(restored), at_save)}


@checks.check
def create_training_client_from_state_with_optimizer():
    """Restored with its optimizer, a model takes exactly the saved model's next step; restored
    without it (Adam moments reset), the same step lands elsewhere."""
    model, path, at_save = saved()
    with_optimizer = service().create_training_client_from_state_with_optimizer(path)
    without_optimizer = service().create_training_client_from_state(path)
    model.load_state_with_optimizer(path).result()
    restored = max_difference(forward_logprobs(with_optimizer), at_save)
    losses = {name: train_step(client, DATA) for name, client in
              [("saved", model), ("with_optimizer", with_optimizer), ("without_optimizer", without_optimizer)]}
    after = forward_logprobs(model)
    return {
        "restored": restored,
        "losses": losses,
        "with_optimizer_after_step": max_difference(forward_logprobs(with_optimizer), after),
        "without_optimizer_after_step": max_difference(forward_logprobs(without_optimizer), after),
    }


if __name__ == "__main__":
    checks.run()
