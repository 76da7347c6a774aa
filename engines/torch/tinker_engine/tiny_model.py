"""Writes the tiny local model (G6): a random-initialised Llama-architecture causal LM as an ordinary
Hugging Face folder (config.json, model.safetensors, tokenizer files), the same bytes for the same seed.

    python -m tinker_engine.tiny_model <dir> [--tokenizer <dir>] [--seed N]

and random models of other sizes in the same form, for measuring what grows with the model (state
and checkpoint sizes, step times):

    python -m tinker_engine.tiny_model <dir> --hidden 512 --layers 4     # ~13M parameters
    python -m tinker_engine.tiny_model <dir> --hidden 1024 --layers 8    # ~100M parameters

with `--heads` (default hidden / 64), `--kv-heads` (default: heads), `--intermediate` (default 8/3 x
hidden, rounded up to a multiple of 32) and `--vocab` (default 256; ids past 255 are never produced by
the tokenizer). Any size flag writes a sized model; none, the tiny one.

The tokenizer is the repository's byte-level one (shared/backend/reference/tokenizer, vocabulary 256),
so the model's vocabulary matches the reference backend's.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import LlamaConfig, LlamaForCausalLM

TINY_SEED = 20260101
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# engines/torch/tinker_engine/ -> the repository root.
DEFAULT_TOKENIZER = Path(__file__).resolve().parents[3] / "shared" / "backend" / "reference" / "tokenizer"


def tiny_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        # Wider than the usual 0.02, so the random model's next-token distributions are far from flat
        # and sampling tests see top_k / top_p cut something.
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


@dataclass(frozen=True)
class ModelSize:
    """A random Llama's dimensions; unset fields take the defaults of the module's docstring."""

    hidden: int
    layers: int
    heads: int | None = None
    kv_heads: int | None = None
    intermediate: int | None = None
    vocab: int = 256


def sized_config(size: ModelSize) -> LlamaConfig:
    heads = size.heads or max(1, size.hidden // 64)
    if size.hidden % heads:
        raise ValueError(f"hidden size {size.hidden} is not a multiple of {heads} heads")
    kv_heads = size.kv_heads or heads
    if heads % kv_heads:
        raise ValueError(f"{heads} heads are not a multiple of {kv_heads} key-value heads")
    if size.vocab < 256:
        raise ValueError(f"vocabulary {size.vocab} is smaller than the byte-level tokenizer's 256")
    return LlamaConfig(
        vocab_size=size.vocab,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate or -(-size.hidden * 8 // 3 // 32) * 32,
        num_hidden_layers=size.layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def write_tiny_model(
    target: Path, tokenizer_dir: Path = DEFAULT_TOKENIZER, seed: int = TINY_SEED, size: ModelSize | None = None
) -> Path:
    """Writes the folder at `target` (replacing what is there) and returns it: the tiny model, or a
    random one of `size`."""
    missing = [name for name in TOKENIZER_FILES if not (tokenizer_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"tokenizer folder {tokenizer_dir} lacks {', '.join(missing)}")
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config() if size is None else sized_config(size)).to(torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial, safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, partial / name)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    parser.add_argument("--seed", type=int, default=TINY_SEED)
    parser.add_argument("--hidden", type=int, help="hidden size: writes a sized model instead of the tiny one")
    parser.add_argument("--layers", type=int, help="decoder layers (default 2)")
    parser.add_argument("--heads", type=int)
    parser.add_argument("--kv-heads", type=int)
    parser.add_argument("--intermediate", type=int)
    parser.add_argument("--vocab", type=int)
    args = parser.parse_args(argv)
    flags = (args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate, args.vocab)
    size = None
    if any(flag is not None for flag in flags):
        size = ModelSize(
            hidden=args.hidden or 64,
            layers=args.layers or 2,
            heads=args.heads,
            kv_heads=args.kv_heads,
            intermediate=args.intermediate,
            vocab=args.vocab or 256,
        )
    path = write_tiny_model(args.target, args.tokenizer, args.seed, size)
    print(f"model written to {path} ({parameter_count(path):,} parameters)", file=sys.stderr)
    return 0


def parameter_count(folder: Path) -> int:
    """The parameters in a written folder's model.safetensors, counted from its header."""
    with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
        return sum(math.prod(weights.get_slice(key).get_shape()) for key in weights.keys())  # noqa: SIM118


if __name__ == "__main__":
    raise SystemExit(main())
