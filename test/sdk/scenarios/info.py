"""What the SDK asks the server about models and samplers: get_info, samplers/{id}, weights_info."""

import functools

from checks import BASE_MODEL, Checks, new_model, service

checks = Checks()

RANK = 8


@functools.cache
def model():
    return new_model(rank=RANK, seed=2)


@checks.check
def server_capabilities_list_the_reference_model():
    capabilities = service().get_server_capabilities()
    return {"models": [model.model_name for model in capabilities.supported_models]}


@checks.check
def training_client_get_info():
    info = model().get_info()
    return {
        "model_id": info.model_id,
        "expected_model_id": model().model_id,
        "model_name": info.model_data.model_name,
        "tokenizer_id": info.model_data.tokenizer_id,
        "is_lora": info.is_lora,
        "lora_rank": info.lora_rank,
    }


@checks.check
def sampling_client_base_model_from_a_base_model():
    """SamplingClient.get_base_model() reads GET /samplers/{sampling_session_id}."""
    return {"base_model": service().create_sampling_client(base_model=BASE_MODEL).get_base_model()}


@checks.check
def sampling_client_base_model_from_a_checkpoint():
    path = model().save_weights_for_sampler("info-sampler").result().path
    return {"base_model": service().create_sampling_client(model_path=path).get_base_model(), "path": path}


@checks.check
def weights_info_of_a_training_checkpoint():
    path = model().save_state("info-state").result().path
    info = service().create_rest_client().get_weights_info_by_tinker_path(path).result()
    return {"base_model": info.base_model, "is_lora": info.is_lora, "lora_rank": info.lora_rank}


if __name__ == "__main__":
    checks.run()
