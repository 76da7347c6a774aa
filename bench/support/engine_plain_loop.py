"""The engine benchmark's baseline (bench/engine.ts): the same work as a plain PEFT loop in one Python
process, with nothing between the steps: no API, queue, worker, protocol or state bytes.

Reads one JSON command per line on standard input and answers one JSON line on standard output:
  {"op": "setup", "model": DIR, "rank": R, "batches": {NAME: [[token, ...], ...]}}   a PEFT model (every
      attention and MLP projection and the unembedding, as the engine's defaults), AdamW over its LoRA
      factors, and named batches of equal-length rows (inputs: a row but its last token; targets: shifted)
  {"op": "add_batch", "name": NAME, "rows": [[token, ...], ...]}   one more named batch
  {"op": "train_step", "batch": NAME}   forward + backward (cross-entropy summed) + AdamW step
  {"op": "sample", "prompt": [...], "num_samples": S, "max_tokens": T, "seed": N}   the base model,
      `generate` with a KV cache, S sequences of exactly T new tokens (temperature 1, no top-k/top-p)
Each answer carries the step's own compute time in ms (`compute_ms`).
"""

from __future__ import annotations

import json
import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]


class PlainLoop:
    def __init__(self, model_dir: str, rank: int, batches: dict[str, list[list[int]]]) -> None:
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        config = LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=TARGETS)
        self.model = get_peft_model(base, config)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)
        self.batches = {name: torch.tensor(rows, dtype=torch.long) for name, rows in batches.items()}

    def train_step(self, name: str) -> dict[str, float]:
        batch = self.batches[name]
        inputs, targets = batch[:, :-1], batch[:, 1:]
        logits = self.model(input_ids=inputs).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        loss = -logprobs.sum()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": float(loss.item()), "tokens": int(targets.numel())}

    def sample(self, prompt: list[int], num_samples: int, max_tokens: int, seed: int) -> dict[str, float]:
        torch.manual_seed(seed)
        with torch.no_grad(), self.model.disable_adapter():
            out = self.model.generate(
                input_ids=torch.tensor([prompt], dtype=torch.long),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_tokens,
                min_new_tokens=max_tokens,
                num_return_sequences=num_samples,
                pad_token_id=0,
            )
        return {"tokens": int(out.shape[0] * (out.shape[1] - len(prompt)))}


def main() -> None:
    # `--threads N`: torch's CPU threads, as the engine's own flag (the bench gives both sides the same).
    if "--threads" in sys.argv:
        torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
    loop: PlainLoop | None = None
    for line in sys.stdin:
        command = json.loads(line)
        started = time.perf_counter()
        if command["op"] == "setup":
            loop = PlainLoop(command["model"], int(command["rank"]), command["batches"])
            answer: dict[str, float] = {}
        elif loop is None:
            raise SystemExit("setup first")
        elif command["op"] == "add_batch":
            loop.batches[command["name"]] = torch.tensor(command["rows"], dtype=torch.long)
            answer = {}
        elif command["op"] == "train_step":
            answer = loop.train_step(command["batch"])
        elif command["op"] == "sample":
            answer = loop.sample(command["prompt"], command["num_samples"], command["max_tokens"], command["seed"])
        else:
            raise SystemExit(f"unknown op {command['op']}")
        answer["compute_ms"] = (time.perf_counter() - started) * 1000
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
