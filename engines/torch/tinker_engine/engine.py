"""The engine's operations (docs/engine-protocol.md, "Operations") on decoded arguments: the handle
table, the base model, the adapter pool. Framing lives in server.py; the computing in training.py,
sampling.py, optim.py, weights.py and state.py.

Handles: a state handle is consumed by forward_backward, optim_step and import_weights (the answer
names a new one); every check that can fail with a `user` error runs before anything changes, so the
old handle stays valid and unchanged then.

Live samples: a `sample` call that its `max_new_tokens` stopped with sequences unfinished keeps its
generation state under a continuation key (answered as `continuation`); the next call naming that key,
on the same sampler with the same request and restored prefixes equal to the state's, continues it
instead of replaying (sampling.py). The states are bounded by count and bytes (live_samples.py: a state
that does not fit is not kept unless stale ones make room); a key is used once, and releasing a sampler
drops its states.

Batched decode (protocol version 2, B1): `sample` calls are queued to the decoder (decode.py), which
advances every live call in shared steps between requests; server.py answers each when it ends.
`stop_sample` ends a running call at the next step boundary with its sequences so far.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import ENGINE_NAME, ENGINE_VERSION, PROTOCOL_VERSIONS
from .adapters import Adapter, AdapterPool, parse_lora_request
from .blob_files import BLOB_FILES_FEATURE, open_blob_file, path_arg, write_blob_file
from .decode import Answer, Decoder
from .errors import EngineError, InfrastructureError, ProtocolError, UserError, user_error
from .inputs import parse_pass_data
from .live_samples import LiveSampleStore
from .losses import check_loss_inputs, resolve_loss
from .models import BaseModel, same_base
from .optim import adamw_step, parse_adam_params
from .sampling import parse_sample_request, same_request, sample
from .state import deserialize_state, read_state, serialize_state, write_state
from .training import PassJob, run_passes
from .weights import (
    ReadWeights,
    check_finite,
    check_fits,
    export_weights,
    import_into,
    read_weights,
    read_weights_from,
    write_weights,
)


@dataclass
class EngineOptions:
    max_resident_adapters: int = 32
    max_batch_tokens: int = 16384
    # Live sample states kept, each a KV cache of num_samples rows (docs/engine-protocol.md): at most
    # this many, holding at most this many bytes of tensors; a state not continued for longer than the
    # idle limit is stale (dropped to make room for a new one).
    max_live_samples: int = 8
    live_sample_bytes: int = 1 << 30
    live_sample_idle_s: float = 30.0
    # Batched decode (protocol version 2): at most this many rows per decode forward, in tiles of
    # `decode_tile_rows` rows (every base linear layer multiplies tile by tile, so a row's result does
    # not depend on the batch, row_tiles.py), and the bytes of KV cache the admitted calls may reserve
    # together (each its rows x (prompt + max_tokens) positions); the rest wait.
    decode_rows: int = 128
    decode_tile_rows: int = 32
    kv_budget_bytes: int = 2 << 30
    clock: Callable[[], float] = time.monotonic


@dataclass
class Sampler:
    adapter: Adapter | None


class Engine:
    def __init__(self, base: BaseModel, options: EngineOptions) -> None:
        self.base = base
        self.options = options
        self.pool = AdapterPool(base, options.max_resident_adapters)
        self.states: dict[str, Adapter] = {}
        self.samplers: dict[str, Sampler] = {}
        self.live_samples = LiveSampleStore(
            options.max_live_samples, options.live_sample_bytes, options.live_sample_idle_s, options.clock
        )
        self.decoder = Decoder(self.pool, options.decode_rows, options.decode_tile_rows, options.kv_budget_bytes)
        # Answers the decoder owes outside a step (calls of a released sampler), for server.py to send.
        self.owed: list[Answer] = []
        self._ids = itertools.count(1)
        self.greeted = False
        self.protocol_version = 1

    # ---- handles

    def _new_state(self, adapter: Adapter) -> dict[str, Any]:
        handle = f"s{next(self._ids)}"
        self.states[handle] = adapter
        return {"handle": handle, "base_model": self.base.name, "weights_version": adapter.weights_version}

    def _state(self, args: dict[str, Any], key: str = "state") -> tuple[str, Adapter]:
        handle = args.get(key)
        if isinstance(handle, dict):
            handle = handle.get("handle")
        if not isinstance(handle, str) or handle not in self.states:
            raise ProtocolError(f"{key}: no state handle {handle!r} in this engine")
        return handle, self.states[handle]

    def _consume(self, handle: str) -> None:
        del self.states[handle]

    # ---- operations

    def dispatch(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "hello":
            return self.hello(args)
        if not self.greeted:
            raise ProtocolError(f"{op}: hello must be the first request")
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            raise ProtocolError(f"unknown op {op!r}")
        return handler(args)

    def hello(self, args: dict[str, Any]) -> dict[str, Any]:
        version = args.get("protocol_version")
        if version not in PROTOCOL_VERSIONS:
            speaks = ", ".join(str(v) for v in PROTOCOL_VERSIONS)
            raise ProtocolError(f"protocol_version {version!r} is not spoken by this engine; it speaks {speaks}")
        self.greeted = True
        self.protocol_version = version
        return {
            "protocol_version": version,
            "engine": {"name": ENGINE_NAME, "version": ENGINE_VERSION},
            "base_models": [self.base.describe()],
            "device": str(self.base.device),
            "dtype": str(self.base.dtype).removeprefix("torch."),
            "features": [BLOB_FILES_FEATURE],
        }

    def op_ping(self, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    def op_create_model(self, args: dict[str, Any]) -> dict[str, Any]:
        same_base(self.base, args.get("base_model"))  # type: ignore[arg-type]
        request = parse_lora_request(args.get("lora_config"))
        shape = self.pool.shape_for(request)
        adapter = Adapter(shape=shape, trainable=True, weights=self.pool.initial_weights(shape, request.seed))
        return {"state": self._new_state(adapter)}

    def _pass_job(self, kind: str, adapter: Adapter, pass_input: Any) -> PassJob:
        if not isinstance(pass_input, dict):
            raise user_error("input", "must be a ForwardBackwardInput")
        loss_fn, config = resolve_loss(pass_input.get("loss_fn"), pass_input.get("loss_fn_config"))
        datums = parse_pass_data(pass_input.get("data"), loss_fn, self.base.vocab_size, self.base.max_context)
        check_loss_inputs(loss_fn, datums)
        return PassJob(kind=kind, adapter=adapter, loss_fn=loss_fn, config=config, datums=datums)  # type: ignore[arg-type]

    @staticmethod
    def _result(outputs: list[dict[str, Any]], metrics: dict[str, float]) -> dict[str, Any]:
        return {"loss_fn_output_type": "ArrayRecord", "loss_fn_outputs": outputs, "metrics": metrics}

    def op_forward(self, args: dict[str, Any]) -> dict[str, Any]:
        _, adapter = self._state(args)
        job = self._pass_job("forward", adapter, args.get("input"))
        [result] = run_passes(self.pool, [job], self.options.max_batch_tokens)
        if result.error is not None:
            raise result.error
        return {"result": self._result(result.outputs, result.metrics)}

    def op_forward_backward(self, args: dict[str, Any]) -> dict[str, Any]:
        handle, adapter = self._state(args)
        job = self._pass_job("forward_backward", adapter, args.get("input"))
        [result] = run_passes(self.pool, [job], self.options.max_batch_tokens)
        if result.error is not None:
            raise result.error
        self._consume(handle)
        return {"state": self._new_state(adapter), "result": self._result(result.outputs, result.metrics)}

    def op_run_passes(self, args: dict[str, Any]) -> dict[str, Any]:
        items = args.get("items")
        if not isinstance(items, list):
            raise ProtocolError("items: must be an array of passes")
        outcomes: list[dict[str, Any] | None] = [None] * len(items)
        jobs: list[PassJob] = []
        positions: list[int] = []
        handles: list[str] = []
        seen: set[int] = set()
        for i, item in enumerate(items):
            if not isinstance(item, dict) or item.get("type") not in ("forward", "forward_backward"):
                raise ProtocolError(f"items[{i}]: must be {{type: forward | forward_backward, state, input}}")
            handle, adapter = self._state(item)
            if id(adapter) in seen:
                raise ProtocolError(f"items[{i}]: a state may appear in one pass of a run_passes call")
            seen.add(id(adapter))
            try:
                jobs.append(self._pass_job(item["type"], adapter, item.get("input")))
            except UserError as error:
                outcomes[i] = {"ok": False, "error": error.to_json()}
                continue
            positions.append(i)
            handles.append(handle)
        results = run_passes(self.pool, jobs, self.options.max_batch_tokens) if jobs else []
        for i, handle, job, result in zip(positions, handles, jobs, results, strict=True):
            if result.error is not None:
                outcomes[i] = {"ok": False, "error": result.error.to_json()}
                continue
            if job.kind == "forward_backward":
                self._consume(handle)
                state = self._new_state(job.adapter)
            else:
                state = {"handle": handle, "base_model": self.base.name, "weights_version": job.adapter.weights_version}
            outcomes[i] = {"ok": True, "state": state, "result": self._result(result.outputs, result.metrics)}
        return {"outcomes": outcomes}

    def op_optim_step(self, args: dict[str, Any]) -> dict[str, Any]:
        handle, adapter = self._state(args)
        hyper = parse_adam_params(args.get("params"))
        self.pool.activate([adapter])
        weights, moment1, moment2, norm = adamw_step(
            {k: p.detach() for k, p in adapter.weights.items()},
            adapter.grad,
            adapter.moment1,
            adapter.moment2,
            adapter.adam_step,
            hyper,
        )
        with torch.no_grad():
            for key, parameter in adapter.weights.items():
                parameter.copy_(weights[key])
        adapter.moment1, adapter.moment2 = moment1, moment2
        adapter.grad = None
        adapter.adam_step += 1
        adapter.weights_version += 1
        self._consume(handle)
        metrics = {"grad_norm:mean": norm, "weights_version:max": float(adapter.weights_version)}
        return {"state": self._new_state(adapter), "result": {"metrics": metrics}}

    def op_export_weights(self, args: dict[str, Any]) -> dict[str, Any]:
        _, adapter = self._state(args)
        kind = args.get("kind")
        if kind not in ("training", "sampler"):
            raise ProtocolError(f"kind: must be training or sampler, got {kind!r}")
        path = path_arg(args)
        if path is not None:
            return write_blob_file(path, lambda out: write_weights(out, adapter, self.base.name, kind))
        return {"weights": export_weights(adapter, self.base.name, kind)}

    @staticmethod
    def _read_weights(args: dict[str, Any], nullable: bool) -> ReadWeights | None:
        """The weights an op names: a file at `path`, else the `weights` bytes (null only if `nullable`)."""
        path = path_arg(args)
        if path is not None:
            with open_blob_file(path) as stream:
                return read_weights_from(stream)
        data = args.get("weights")
        if data is None and nullable:
            return None
        if not isinstance(data, bytes):
            raise ProtocolError(f"weights: must be a $bytes reference{' or null' if nullable else ''}, or path a file")
        return read_weights(data)

    def op_import_weights(self, args: dict[str, Any]) -> dict[str, Any]:
        handle, adapter = self._state(args)
        read = self._read_weights(args, nullable=False)
        assert read is not None
        update = import_into(adapter, read, self.base.name, args.get("optimizer") is True)
        device = self.base.device if self.pool.is_resident(adapter) else torch.device("cpu")
        with torch.no_grad():
            for key, parameter in adapter.weights.items():
                parameter.copy_(update["weights"][key].to(device))

        def moved(tensors: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
            return None if tensors is None else {k: v.to(device, torch.float32) for k, v in tensors.items()}

        adapter.moment1 = moved(update["moment1"])
        adapter.moment2 = moved(update["moment2"])
        adapter.adam_step = update["adam_step"]
        adapter.grad = None
        self._consume(handle)
        return {"state": self._new_state(adapter)}

    def op_load_sampler(self, args: dict[str, Any]) -> dict[str, Any]:
        same_base(self.base, args.get("base_model"))  # type: ignore[arg-type]
        read = self._read_weights(args, nullable=True)
        adapter: Adapter | None = None
        if read is not None:
            if read.base_model != self.base.name:
                raise InfrastructureError(f"sampler weights are for {read.base_model}, not {self.base.name}")
            # Weights that are not finite are the checkpoint's fault, not the store's: a user error (E6).
            check_finite(read, "model_path")
            try:
                check_fits(read, self.pool.tensor_shapes(read.shape), "weights")
            except UserError as error:
                raise InfrastructureError(error.message) from error
            adapter = Adapter(shape=read.shape, trainable=False, weights=read.weights)
        handle = f"p{next(self._ids)}"
        self.samplers[handle] = Sampler(adapter)
        return {"sampler": handle}

    def op_sample(self, args: dict[str, Any]) -> dict[str, Any]:
        handle = args.get("sampler")
        if not isinstance(handle, str) or handle not in self.samplers:
            raise ProtocolError(f"sampler: no sampler handle {handle!r} in this engine")
        params = parse_sample_request(args.get("request"), self.base)
        key = args.get("continuation")
        if key is not None and not isinstance(key, str):
            raise ProtocolError("continuation: must be a string or null")
        # Taken out whether or not it fits: a key is used once, and a failed call leaves nothing behind.
        entry = self.live_samples.take(key) if key is not None else None
        live = entry.state if entry is not None and entry.sampler == handle else None
        if live is not None and not same_request(live.params, params):
            live = None
        run, kept = sample(
            self.pool, self.samplers[handle].adapter, params, args.get("resume"), args.get("max_new_tokens"), live
        )
        if kept is not None:
            continuation = f"c{next(self._ids)}"
            if self.live_samples.put(continuation, handle, kept):
                run["continuation"] = continuation
        return run

    def submit_sample(self, key: Any, args: dict[str, Any]) -> None:
        """Queues a `sample` call to the decoder (version 2): answered by a later `decoder.step()`.
        A bad request raises here, answered at once."""
        handle = args.get("sampler")
        if not isinstance(handle, str) or handle not in self.samplers:
            raise ProtocolError(f"sampler: no sampler handle {handle!r} in this engine")
        params = parse_sample_request(args.get("request"), self.base)
        adapter = self.samplers[handle].adapter
        self.decoder.submit(key, params, adapter, args.get("resume"), args.get("max_new_tokens"))

    def op_stop_sample(self, args: dict[str, Any]) -> dict[str, Any]:
        """Ends the running or queued `sample` request `call` at the next step boundary."""
        call = args.get("call")
        if not isinstance(call, int):
            raise ProtocolError("call: must be the id of a sample request")
        return {"stopped": self.decoder.stop(call)}

    def op_serialize_state(self, args: dict[str, Any]) -> dict[str, Any]:
        _, adapter = self._state(args)
        path = path_arg(args)
        if path is not None:
            return write_blob_file(path, lambda out: write_state(out, adapter, self.base.name))
        return {"bytes": serialize_state(adapter, self.base.name)}

    def op_deserialize_state(self, args: dict[str, Any]) -> dict[str, Any]:
        path = path_arg(args)
        if path is not None:
            with open_blob_file(path) as stream:
                base_model, adapter = read_state(stream)
        else:
            data = args.get("bytes")
            if not isinstance(data, bytes):
                raise ProtocolError("bytes: must be a $bytes reference, or path a file")
            base_model, adapter = deserialize_state(data)
        if base_model != self.base.name:
            raise InfrastructureError(f"state is for base model {base_model}, this engine serves {self.base.name}")
        try:
            expected = self.pool.tensor_shapes(adapter.shape)
        except EngineError as error:
            raise InfrastructureError(error.message) from error
        if {k: tuple(v.shape) for k, v in adapter.weights.items()} != expected:
            raise InfrastructureError("state tensors do not fit this base model")
        return {"state": self._new_state(adapter)}

    def op_release(self, args: dict[str, Any]) -> dict[str, Any]:
        handles = args.get("handles")
        if not isinstance(handles, list):
            raise ProtocolError("handles: must be an array of strings")
        for handle in handles:
            if handle in self.states:
                adapter = self.states.pop(handle)
                self.pool.drop(adapter)
            elif handle in self.samplers:
                sampler = self.samplers.pop(handle)
                self.live_samples.drop_sampler(handle)
                if sampler.adapter is not None:
                    self.owed.extend(self.decoder.drop_adapter(sampler.adapter))
                    self.pool.drop(sampler.adapter)
        return {}
