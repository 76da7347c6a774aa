"""The request loop: frames in on standard input, answers out on standard output (nothing else is
written there), logs on standard error.

Version 1 (docs/engine-protocol.md): one request at a time, answered in order. Version 2: a reader
thread takes frames as they come; between decode steps every request read so far is handled in order,
`sample` requests join the decoder (engine.py, decode.py) and are answered by id when they end, so
requests run while samples decode and answers may come out of order.

    python -m tinker_engine --base-model <hub id or folder> [--device cpu|cuda] [--dtype float32|bfloat16]
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO

import numpy as np

from .engine import Engine, EngineOptions
from .errors import EngineError, InfrastructureError, ProtocolError
from .models import choose_device, choose_dtype, load_base_model
from .protocol import Encoder, Frame, decode_value, read_frame, write_frame
from .row_tiles import check_tile_rows

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


def _reply(request_id: Any, op: Any, outcome: dict[str, Any] | Exception) -> Frame:
    """The answer frame for a result or a failure."""
    if isinstance(outcome, dict):
        try:
            encoder = Encoder()
            encoded = encode_value(outcome, encoder)
            return Frame({"id": request_id, "ok": True, "result": encoded}, encoder.buffers)
        except Exception as error:  # noqa: BLE001 - an unencodable result is the engine's failure
            outcome = error
    if isinstance(outcome, EngineError):
        if outcome.kind != "user":
            log.warning("%s failed (%s): %s", op, outcome.kind, outcome.message)
        return Frame({"id": request_id, "ok": False, "error": outcome.to_json()})
    log.error("%s failed: %s", op, "".join(traceback.format_exception(outcome)))
    message = f"{op}: {type(outcome).__name__}: {outcome}"
    return Frame({"id": request_id, "ok": False, "error": InfrastructureError(message).to_json()})


def answer(engine: Engine, frame: Frame) -> tuple[Frame | None, bool]:
    """The answer to one request (None: a version 2 `sample`, answered when it ends), and whether the
    loop should stop after sending it."""
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
        if op == "sample" and engine.greeted and engine.protocol_version >= 2:
            engine.submit_sample(request_id, args)
            return None, False
        started = time.perf_counter()
        result = engine.dispatch(op, args)
        log.debug("%s answered in %.1f ms", op, (time.perf_counter() - started) * 1000)
        return _reply(request_id, op, result), False
    except Exception as error:  # noqa: BLE001 - every failure is answered, not fatal
        return _reply(request_id, op, error), False


def _read_frames(input_stream: BinaryIO, frames: queue.Queue[Frame | ProtocolError | None]) -> None:
    while True:
        try:
            frame = read_frame(input_stream)
        except ProtocolError as error:
            frames.put(error)
            return
        frames.put(frame)
        if frame is None:
            return


def serve(engine: Engine, input_stream: BinaryIO, output_stream: BinaryIO) -> int:
    frames: queue.Queue[Frame | ProtocolError | None] = queue.Queue()
    threading.Thread(target=_read_frames, args=(input_stream, frames), daemon=True).start()
    while True:
        # Every request read so far is handled before the next decode step; with no live call, wait.
        try:
            item = frames.get(block=not engine.decoder.busy)
        except queue.Empty:
            for key, outcome in engine.decoder.step():
                write_frame(output_stream, _reply(key, "sample", outcome))
            continue
        if isinstance(item, ProtocolError):
            # The stream is out of step: nothing after this can be framed, so answer once and stop.
            write_frame(output_stream, Frame({"id": None, "ok": False, "error": item.to_json()}))
            return 2
        if item is None:
            return 0
        reply, stop = answer(engine, item)
        if reply is not None:
            write_frame(output_stream, reply)
        for key, outcome in engine.owed:
            write_frame(output_stream, _reply(key, "sample", outcome))
        engine.owed.clear()
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
    parser.add_argument(
        "--decode-rows",
        type=int,
        default=128,
        help="most rows per batched decode forward (protocol 2), rounded up to whole tiles (default 128)",
    )
    parser.add_argument(
        "--decode-tile-rows",
        type=int,
        default=None,
        help=(
            "rows per tile of a batched decode forward, a multiple of 8: a forward runs as many tiles as its"
            " rows need and every base linear layer multiplies tile by tile (default 32 on a CPU; on other"
            " devices --decode-rows, one fixed-width tile)"
        ),
    )
    parser.add_argument(
        "--kv-budget-bytes",
        type=int,
        default=2 << 30,
        help="KV cache bytes the admitted sample calls may reserve together; the rest wait (default 2 GiB)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--log-level", default=os.environ.get("TINKER_ENGINE_LOG", "INFO"))
    args = parser.parse_args(argv)
    if args.decode_tile_rows is not None:
        try:
            check_tile_rows(args.decode_tile_rows)
        except ValueError as error:
            parser.error(f"--decode-tile-rows: {error}")
    return args


def decode_tile_rows(args: argparse.Namespace, device: Any) -> int:
    """`--decode-tile-rows`, or its default for `device`. On a CPU, tiles of 32 rows: a step pays for the
    tiles its live rows fill, not for a fixed width. Elsewhere one tile of `--decode-rows` rows: a GPU
    decode step is bound by reading the weights, which a batched product over tiles would read once per
    tile, and its kernels are chosen by shape (engines/torch/README.md)."""
    if args.decode_tile_rows is not None:
        return int(args.decode_tile_rows)
    return 32 if device.type == "cpu" else int(args.decode_rows)


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
        decode_rows=args.decode_rows,
        decode_tile_rows=decode_tile_rows(args, device),
        kv_budget_bytes=args.kv_budget_bytes,
    )
    engine = Engine(base, options)
    return serve(engine, sys.stdin.buffer, frames)
