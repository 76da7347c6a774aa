"""LoRA adapters on the one resident base (G3): PEFT named adapters, at most `max_resident` of them
on the device at once, least recently used evicted to host memory and put back on next use.

An `Adapter` owns its tensors under PEFT's saved names (`base_model.model.<module>.lora_A.weight`):
while resident they are the PEFT layer's own parameters, while evicted host copies. Training adapters
carry AdamW's moments and the gradient accumulator beside them, which move with the weights.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

from .errors import InfrastructureError, user_error
from .models import BaseModel
from .prng import hash_words, seed_words

# Keys the high word of a LoRA seed (`AdapterPool.initial_weights`) apart from the samplers' draws.
TAG_LORA_SEED = 0x4C4F5241

MAX_RANK = 1024
# A rank-1 adapter on one module that is never used nor deleted: PEFT's model needs an active adapter
# to exist, and every forward here names its adapters per row (`adapter_names`).
ANCHOR = "_anchor"
ATTENTION_PARENTS = ("attn", "attention")
MLP_PARENTS = ("mlp", "feed_forward", "ffn")


@dataclass(frozen=True)
class AdapterShape:
    """What fixes an adapter's tensors: rank, alpha and the modules it adapts (PEFT suffixes)."""

    rank: int
    alpha: float
    target_modules: tuple[str, ...]

    def lora_config(self) -> LoraConfig:
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            target_modules=list(self.target_modules),
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )


@dataclass(frozen=True)
class LoraRequest:
    """`lora_config` of create_model, checked."""

    rank: int
    seed: int
    train_attn: bool
    train_mlp: bool
    train_unembed: bool


def parse_lora_request(value: object) -> LoraRequest:
    if not isinstance(value, dict):
        raise user_error("lora_config", "must be an object")
    rank = value.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= MAX_RANK:
        raise user_error("lora_config.rank", f"must be an integer in [1, {MAX_RANK}], got {rank}")
    seed = value.get("seed")
    seed = 0 if seed is None else seed
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise user_error("lora_config.seed", f"must be an integer, got {seed}")
    flags = {}
    for name in ("train_attn", "train_mlp", "train_unembed"):
        flag = value.get(name)
        if flag is not None and not isinstance(flag, bool):
            raise user_error(f"lora_config.{name}", f"must be a boolean, got {flag}")
        flags[name] = True if flag is None else flag
    if not any(flags.values()):
        raise user_error("lora_config", "train_attn, train_mlp and train_unembed are all false: nothing to train")
    return LoraRequest(rank=rank, seed=seed, **flags)


@dataclass
class Adapter:
    shape: AdapterShape
    trainable: bool
    weights: dict[str, torch.Tensor]
    moment1: dict[str, torch.Tensor] | None = None
    moment2: dict[str, torch.Tensor] | None = None
    grad: dict[str, torch.Tensor] | None = None
    adam_step: int = 0
    weights_version: int = 0
    # The PEFT adapter name while resident on the device, else None.
    slot: str | None = field(default=None, repr=False)

    def keys(self) -> list[str]:
        return sorted(self.weights)


def _module_path(key: str) -> str:
    """`base_model.model.<path>.lora_A.weight` -> `<path>`."""
    return key.removeprefix("base_model.model.").rsplit(".lora_", 1)[0]


class AdapterPool:
    """PEFT named adapters on the base model, with an LRU bound on how many are resident."""

    def __init__(self, base: BaseModel, max_resident: int) -> None:
        if max_resident < 1:
            raise ValueError("max_resident must be >= 1")
        self.base = base
        self.max_resident = max_resident
        # Both read before PEFT wraps the base's modules in its own layers.
        self._linear = self._linear_modules(base.model)
        self._unembed = self._unembed_path()
        anchor_target = next(iter(self._linear))
        self.peft: PeftModel = get_peft_model(
            base.model, AdapterShape(1, 1.0, (anchor_target,)).lora_config(), adapter_name=ANCHOR
        )
        self.peft.eval()
        for parameter in self.peft.parameters():
            parameter.requires_grad_(False)
        self._resident: OrderedDict[str, Adapter] = OrderedDict()
        # The adapter PEFT has active (for single-adapter batches), or None for the anchor.
        self._active: str | None = None
        self._names = (f"a{n}" for n in itertools.count())
        self.loads = 0
        self.evictions = 0

    # ---- which modules an adapter adapts

    @staticmethod
    def _linear_modules(model: nn.Module) -> dict[str, nn.Linear]:
        return {name: module for name, module in model.named_modules() if isinstance(module, nn.Linear)}

    def _unembed_path(self) -> str | None:
        output = self.base.model.get_output_embeddings()
        for name, module in self._linear.items():
            if module is output:
                return name
        return None

    def shape_for(self, request: LoraRequest) -> AdapterShape:
        """Target modules as PEFT suffixes (`self_attn.q_proj`): attention and MLP projections by their
        parent module's name, the unembedding by identity with the output embeddings."""
        unembed = self._unembed
        targets: set[str] = set()
        for path in self._linear:
            if path == unembed:
                if request.train_unembed:
                    targets.add(path.rsplit(".", 1)[-1])
                continue
            parts = path.split(".")
            if len(parts) < 2:
                continue
            parent = parts[-2].lower()
            suffix = f"{parts[-2]}.{parts[-1]}"
            if request.train_attn and any(word in parent for word in ATTENTION_PARENTS):
                targets.add(suffix)
            elif request.train_mlp and any(word in parent for word in MLP_PARENTS):
                targets.add(suffix)
        if not targets:
            raise user_error("lora_config", f"base model {self.base.name} has no modules of the kinds asked to train")
        return AdapterShape(rank=request.rank, alpha=float(request.rank), target_modules=tuple(sorted(targets)))

    def tensor_shapes(self, shape: AdapterShape) -> dict[str, tuple[int, ...]]:
        """PEFT's saved names and shapes of an adapter's tensors (its matching rule: a module path equal
        to a target or ending in `.target`)."""
        out: dict[str, tuple[int, ...]] = {}
        for path, module in self._linear.items():
            if any(path == target or path.endswith("." + target) for target in shape.target_modules):
                out[f"base_model.model.{path}.lora_A.weight"] = (shape.rank, module.in_features)
                out[f"base_model.model.{path}.lora_B.weight"] = (module.out_features, shape.rank)
        if not out:
            raise user_error("target_modules", f"match no linear module of base model {self.base.name}")
        return out

    def initial_weights(self, shape: AdapterShape, seed: int) -> dict[str, torch.Tensor]:
        """A uniform in +-1/sqrt(fan_in) (PEFT's default bound) keyed by the whole `seed`, B zero, so a
        new adapter leaves the base model's outputs unchanged and the same seed gives the same bits on
        every device.

        The CPU generator keeps only 32 bits of a seed (its Mersenne Twister is seeded so), which made
        seeds 2^53 - 1 and -1 give one model. So the low word seeds one generator and, when the high
        word is not zero, a second generator keyed by a bijective mix of it adds its uniform modulo 1
        (still uniform): every 64-bit seed keys its own pair, and seeds in [0, 2^32) keep their bits."""
        low, high = seed_words(seed)
        generator = torch.Generator(device="cpu").manual_seed(low)
        shift = torch.Generator(device="cpu").manual_seed(hash_words(TAG_LORA_SEED, high)) if high else None
        weights: dict[str, torch.Tensor] = {}
        for key, dims in sorted(self.tensor_shapes(shape).items()):
            if ".lora_A." in key:
                bound = 1.0 / math.sqrt(dims[1])
                uniform = torch.rand(dims, generator=generator, dtype=torch.float32)
                if shift is not None:
                    uniform = torch.remainder(uniform + torch.rand(dims, generator=shift, dtype=torch.float32), 1.0)
                weights[key] = (uniform * 2 - 1) * bound
            else:
                weights[key] = torch.zeros(dims, dtype=torch.float32)
        return weights

    # ---- forwards

    def forward(self, adapter_names: list[str], **inputs: Any) -> Any:
        """The PEFT model on a batch whose row r uses adapter `adapter_names[r]` (`__base__`: none).
        One adapter for every row takes PEFT's plain path (the active adapter), cheaper than its
        mixed-batch path by about a third on the tiny model."""
        unique = set(adapter_names)
        if len(unique) > 1:
            return self.peft(adapter_names=adapter_names, **inputs)
        (name,) = unique
        if name == "__base__":
            with self.peft.disable_adapter():
                return self.peft(**inputs)
        if self._active != name:
            self.peft.base_model.set_adapter(name)
            self._active = name
            self._restore_grad_flags()
        return self.peft(**inputs)

    # ---- residency

    @property
    def resident_count(self) -> int:
        return len(self._resident)

    def is_resident(self, adapter: Adapter) -> bool:
        return adapter.slot is not None and self._resident.get(adapter.slot) is adapter

    def activate(self, adapters: list[Adapter]) -> None:
        """Puts every adapter on the device (evicting least recently used others) and marks them used."""
        wanted = {id(a) for a in adapters}
        if len(wanted) > self.max_resident:
            raise InfrastructureError(f"{len(wanted)} adapters in one batch exceed the bound of {self.max_resident}")
        for adapter in adapters:
            if self.is_resident(adapter):
                self._resident.move_to_end(adapter.slot)  # type: ignore[arg-type]
                continue
            while len(self._resident) >= self.max_resident:
                victim_slot = next(slot for slot, a in self._resident.items() if id(a) not in wanted)
                self._evict(self._resident[victim_slot])
            self._load(adapter)
        # Also after a load or drop between two calls: PEFT's add and delete reset the flags.
        self._restore_grad_flags()

    def drop(self, adapter: Adapter) -> None:
        """Frees the adapter's device slot without keeping a copy (its handle is gone)."""
        if self.is_resident(adapter):
            slot = adapter.slot
            assert slot is not None
            self._delete_slot(slot)
        adapter.slot = None

    def evict(self, adapter: Adapter) -> None:
        if self.is_resident(adapter):
            self._evict(adapter)

    def _evict(self, adapter: Adapter) -> None:
        slot = adapter.slot
        assert slot is not None
        host = torch.device("cpu")
        adapter.weights = {key: value.detach().to(host, copy=True) for key, value in adapter.weights.items()}
        adapter.moment1 = _moved(adapter.moment1, host)
        adapter.moment2 = _moved(adapter.moment2, host)
        adapter.grad = _moved(adapter.grad, host)
        self._delete_slot(slot)
        adapter.slot = None
        self.evictions += 1

    def _delete_slot(self, slot: str) -> None:
        del self._resident[slot]
        if self._active == slot:
            self.peft.base_model.set_adapter(ANCHOR)
            self._active = None
        self.peft.delete_adapter(slot)

    def _load(self, adapter: Adapter) -> None:
        slot = next(self._names)
        self.peft.add_adapter(slot, adapter.shape.lora_config())
        parameters = self._slot_parameters(slot)
        if sorted(parameters) != adapter.keys():
            self.peft.delete_adapter(slot)
            raise InfrastructureError("adapter tensors do not match the modules PEFT adapted")
        device = self.base.device
        # LoRA factors stay float32 whatever the base's dtype (AdamW on bfloat16 would lose steps).
        dtype = torch.float64 if self.base.dtype == torch.float64 else torch.float32
        with torch.no_grad():
            for key, parameter in parameters.items():
                parameter.data = adapter.weights[key].to(device=device, dtype=dtype).clone()
        adapter.weights = dict(parameters)
        adapter.moment1 = _moved(adapter.moment1, device)
        adapter.moment2 = _moved(adapter.moment2, device)
        adapter.grad = _moved(adapter.grad, device)
        adapter.slot = slot
        self._resident[slot] = adapter
        self.loads += 1

    def _slot_parameters(self, slot: str) -> dict[str, nn.Parameter]:
        marker = f".{slot}."
        out: dict[str, nn.Parameter] = {}
        for name, parameter in self.peft.named_parameters():
            if marker in name and ".lora_" in name:
                out[name.replace(marker, ".")] = parameter
        return out

    def _restore_grad_flags(self) -> None:
        # PEFT resets requires_grad to "active adapter only" whenever an adapter is added.
        for adapter in self._resident.values():
            for parameter in adapter.weights.values():
                parameter.requires_grad_(adapter.trainable)


def _moved(tensors: dict[str, torch.Tensor] | None, device: torch.device) -> dict[str, torch.Tensor] | None:
    if tensors is None:
        return None
    return {key: value.to(device) for key, value in tensors.items()}
