"""The one resident base model (G3): a Hugging Face causal LM by hub id or local path, loaded offline,
frozen, in evaluation mode (no dropout), float32 on CPU and bfloat16 on a GPU unless told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .errors import InfrastructureError, user_error

# float64 serves exact-gradient tests (finite differences); engines run float32 or bfloat16.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """Half-precision logits made float32 before a softmax; float32 and float64 stay as they are."""
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def choose_device(requested: str | None) -> torch.device:
    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def choose_dtype(device: torch.device, requested: str | None) -> torch.dtype:
    if requested:
        if requested not in DTYPES:
            raise ValueError(f"dtype {requested!r} is not one of {', '.join(DTYPES)}")
        return DTYPES[requested]
    return torch.float32 if device.type == "cpu" else torch.bfloat16


@dataclass
class BaseModel:
    """The loaded base: its name as the worker and `adapter_config.json` spell it, model and tokenizer."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    vocab_size: int
    max_context: int
    device: torch.device
    dtype: torch.dtype

    def describe(self) -> dict[str, object]:
        """What `hello` reports: the limits BASE_MODELS should name for the API to refuse at submit (B2)."""
        return {
            "name": self.name,
            "tokenizer_id": self.name,
            "vocab_size": self.vocab_size,
            "max_context_length": self.max_context,
        }


def _max_context(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int:
    limit = getattr(model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and limit > 0:
        return limit
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < 1_000_000:
        return tokenizer_limit
    return 2048


def load_base_model(name: str, device: torch.device, dtype: torch.dtype) -> BaseModel:
    """Loads `name` (a hub id in the local cache, or a folder) without touching the network."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(name, local_files_only=True, dtype=dtype)
    except (OSError, ValueError) as error:
        raise InfrastructureError(f"base model {name}: cannot be loaded offline: {error}") from error
    model.to(device)
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    # The logits' width can exceed the tokenizer's vocabulary (padded embeddings); ids past the
    # tokenizer are still valid model inputs, so the model's width is the vocabulary here.
    output = model.get_output_embeddings()
    vocab_size = int(output.weight.shape[0]) if isinstance(output, nn.Linear) else int(model.config.vocab_size)
    return BaseModel(
        name=name,
        model=model,
        tokenizer=tokenizer,
        vocab_size=vocab_size,
        max_context=_max_context(model, tokenizer),
        device=device,
        dtype=dtype,
    )


def same_base(loaded: BaseModel, requested: str, field: str = "base_model") -> None:
    """One base per engine: a request for another is the caller's mistake, named in the error."""
    if requested != loaded.name:
        raise user_error(field, f"this engine serves base model {loaded.name}, not {requested}")
