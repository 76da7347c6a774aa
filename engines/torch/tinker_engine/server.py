"""The request loop: frames in on standard input, answers out on standard output (nothing else is
written there), logs on standard error. One request at a time, answered in order.

    python -m tinker_engine --base-model <hub id or folder> [--device cpu|cuda] [--dtype float32|bfloat16]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from typing import Any, BinaryIO

import numpy as np

from .engine import Engine, EngineOptions
from .errors import EngineError, InfrastructureError, ProtocolError
from .models import choose_device, choose_dtype, load_base_model
from .protocol import Encoder, Frame, decode_value, read_frame, write_frame

log = logging.getLogger("tinker_engine")


def encode_value(value: Any, encoder: Encoder) -> Any:
    if isinstance(value, np.ndarray):
        return encoder.tensor(value)
    if isinstance(value, (bytes, bytearray)):
        return encoder.bytes(bytes(value))
    if isinstance(value, dict):
        return {key: encode_value(item, encoder) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_value(item, encoder) for item in value]
    if isinstance(value, float) and not np.isfinite(value):
        # JSON has no NaN or infinity; a metric that overflowed is an engine fault, not a number.
        raise InfrastructureError(f"a result holds the non-finite number {value}")
    return value


def answer(engine: Engine, frame: Frame) -> tuple[Frame, bool]:
    """The answer to one request, and whether the loop should stop after sending it."""
    header = frame.header
    request_id = header.get("id")
    op = header.get("op")
    try:
        if not isinstance(request_id, int) or not isinstance(op, str):
            raise ProtocolError("a request needs an integer id and a string op")
        args = decode_value(header.get("args") or {}, frame.buffers)
        if not isinstance(args, dict):
            raise ProtocolError("args must be an object")
        if op == "shutdown":
            return Frame({"id": request_id, "ok": True, "result": {}}), True
        started = time.perf_counter()
        result = engine.dispatch(op, args)
        encoder = Encoder()
        encoded = encode_value(result, encoder)
        log.debug("%s answered in %.1f ms", op, (time.perf_counter() - started) * 1000)
        return Frame({"id": request_id, "ok": True, "result": encoded}, encoder.buffers), False
    except EngineError as error:
        if error.kind != "user":
            log.warning("%s failed (%s): %s", op, error.kind, error.message)
        return Frame({"id": request_id, "ok": False, "error": error.to_json()}), False
    except Exception as error:  # noqa: BLE001 - every other failure is the engine's, reported not fatal
        log.error("%s failed: %s", op, traceback.format_exc())
        message = f"{op}: {type(error).__name__}: {error}"
        return Frame({"id": request_id, "ok": False, "error": InfrastructureError(message).to_json()}), False


def serve(engine: Engine, input_stream: BinaryIO, output_stream: BinaryIO) -> int:
    while True:
        try:
            frame = read_frame(input_stream)
        except ProtocolError as error:
            # The stream is out of step: nothing after this can be framed, so answer once and stop.
            write_frame(output_stream, Frame({"id": None, "ok": False, "error": error.to_json()}))
            return 2
        if frame is None:
            return 0
        reply, stop = answer(engine, frame)
        write_frame(output_stream, reply)
        if stop:
            return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tinker_engine", description="PyTorch + PEFT engine (docs/engine-protocol.md)"
    )
    parser.add_argument(
        "--base-model", required=True, help="Hugging Face hub id (already in the local cache) or model folder"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--dtype", default=None, help="float32 or bfloat16 (default: float32 on CPU, bfloat16 on GPU)")
    parser.add_argument(
        "--max-resident-adapters", type=int, default=32, help="LoRA adapters kept on the device at once"
    )
    parser.add_argument("--max-batch-tokens", type=int, default=16384, help="padded tokens per forward in a fused pass")
    parser.add_argument(
        "--max-live-samples",
        type=int,
        default=8,
        help="sample calls whose live state (KV cache) is kept for their next slice (0: none; each replays)",
    )
    parser.add_argument(
        "--live-sample-bytes",
        type=int,
        default=1 << 30,
        help="bytes of tensors (KV caches) the kept live sample states may hold together (default 1 GiB)",
    )
    parser.add_argument(
        "--live-sample-idle-s",
        type=float,
        default=30.0,
        help="seconds after which a live sample state not continued may be dropped to make room (default 30)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--log-level", default=os.environ.get("TINKER_ENGINE_LOG", "INFO"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, output: BinaryIO | None = None) -> int:
    """Serves frames on `output` (standard output unless given; `__main__` passes it set aside)."""
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="engine %(levelname)s %(message)s")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    frames = output if output is not None else sys.stdout.buffer
    device = choose_device(args.device)
    dtype = choose_dtype(device, args.dtype)
    started = time.perf_counter()
    try:
        base = load_base_model(args.base_model, device, dtype)
    except EngineError as error:
        log.error("%s", error.message)
        return 1
    log.info(
        "base model %s loaded on %s as %s in %.1f s",
        base.name,
        device,
        str(dtype).removeprefix("torch."),
        time.perf_counter() - started,
    )
    options = EngineOptions(
        max_resident_adapters=args.max_resident_adapters,
        max_batch_tokens=args.max_batch_tokens,
        max_live_samples=args.max_live_samples,
        live_sample_bytes=args.live_sample_bytes,
        live_sample_idle_s=args.live_sample_idle_s,
    )
    engine = Engine(base, options)
    return serve(engine, sys.stdin.buffer, frames)
