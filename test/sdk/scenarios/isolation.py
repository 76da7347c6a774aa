"""Tenant isolation through the SDK: a second tenant's client cannot reach the first tenant's model or
checkpoints. Nothing here trains, so it runs on every SDK wire format."""

import functools

import tinker

from checks import BASE_MODEL, Checks, new_model, other_tenant, service

checks = Checks()


@functools.cache
def owned():
    """The owner's model with a training and a sampler checkpoint."""
    model = new_model(seed=4)
    state = model.save_state("owner-state").result().path
    sampler = model.save_weights_for_sampler("owner-sampler").result().path
    return model, state, sampler


def refusal(call) -> dict:
    """How the SDK refused `call` (the check fails if it did not)."""
    try:
        call()
    except (tinker.APIStatusError, tinker.RequestFailedError) as error:
        return {"raised": type(error).__name__, "status": getattr(error, "status_code", None), "message": str(error)[:300]}
    raise AssertionError("the SDK did not raise: the other tenant's call succeeded")


@checks.check
def owner_uses_its_own_checkpoints():
    """The control: the same calls succeed for the owner."""
    _, state, sampler = owned()
    new_model(seed=4).load_state(state).result()
    service().create_sampling_client(model_path=sampler)
    return {"state": state, "sampler": sampler}


@checks.check
def other_cannot_load_the_owners_state():
    _, state, _ = owned()
    theirs = other_tenant().create_lora_training_client(base_model=BASE_MODEL, rank=8)
    return refusal(lambda: theirs.load_state(state).result())


@checks.check
def other_cannot_create_a_training_client_from_the_owners_state():
    _, state, _ = owned()
    return refusal(lambda: other_tenant().create_training_client_from_state(state))


@checks.check
def other_cannot_sample_the_owners_checkpoint():
    _, _, sampler = owned()
    return refusal(lambda: other_tenant().create_sampling_client(model_path=sampler))


@checks.check
def other_cannot_use_the_owners_model():
    """The public API attaches to a model only by creating it, so this builds the TrainingClient the
    way ServiceClient does, on the other tenant's connection, with the owner's model id."""
    model, _, _ = owned()
    intruder = tinker.TrainingClient(other_tenant().holder, model_seq_id=0, model_id=model.model_id)
    return refusal(lambda: intruder.save_state("intruder").result())


if __name__ == "__main__":
    checks.run()
