"""Writes the tiny local model (G6): a random-initialised Llama-architecture causal LM as an ordinary
Hugging Face folder (config.json, model.safetensors, tokenizer files), the same bytes for the same seed.

    python -m tinker_engine.tiny_model <dir> [--tokenizer <dir>] [--seed N]

The tokenizer is the repository's byte-level one (shared/backend/reference/tokenizer, vocabulary 256),
so the model's vocabulary matches the reference backend's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch
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


def write_tiny_model(target: Path, tokenizer_dir: Path = DEFAULT_TOKENIZER, seed: int = TINY_SEED) -> Path:
    """Writes the folder at `target` (replacing what is there) and returns it."""
    missing = [name for name in TOKENIZER_FILES if not (tokenizer_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"tokenizer folder {tokenizer_dir} lacks {', '.join(missing)}")
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config()).to(torch.float32)
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
    args = parser.parse_args(argv)
    path = write_tiny_model(args.target, args.tokenizer, args.seed)
    print(f"tiny model written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
