"""safetensors files with stable bytes: keys sorted, metadata sorted, no padding beyond the format's
8-byte alignment of the header. (The safetensors library orders metadata by a hash map, so the same
tensors can give different bytes per call.)

Written and read as streams, one tensor at a time: the header is laid out from the tensors' shapes and
dtypes alone, then each tensor is copied to host memory only while its bytes are written, so writing
a state of any size to a file holds at most one tensor's host copy beyond the tensors themselves
(docs/engine-protocol.md, "Blobs as files"). Reading does the same in reverse.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from typing import BinaryIO

import torch

_DTYPES = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_TORCH_DTYPES = {name: dtype for dtype, name in _DTYPES.items()}
# Read in slices of at most this many bytes, so a huge tensor is not read with one giant call.
_READ_CHUNK = 64 * 1024 * 1024


def _layout(
    tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None, cast: torch.dtype | None
) -> tuple[bytes, int]:
    """The file's header (length prefix included) and its total size in bytes."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    for key in sorted(tensors):
        tensor = tensors[key]
        dtype = cast or tensor.dtype
        size = tensor.numel() * torch.empty((), dtype=dtype).element_size()
        header[key] = {"dtype": _DTYPES[dtype], "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    prefix = struct.pack("<Q", len(raw)) + raw
    return prefix, len(prefix) + offset


def safetensors_size(
    tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None, cast: torch.dtype | None = None
) -> int:
    return _layout(tensors, metadata, cast)[1]


def safetensors_chunks(
    tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None, cast: torch.dtype | None = None
) -> Iterator[bytes | memoryview]:
    """The file's bytes in order: the header, then each tensor's bytes (cast to `cast` when given)."""
    prefix, _ = _layout(tensors, metadata, cast)
    yield prefix
    for key in sorted(tensors):
        host = tensors[key].detach().to("cpu", cast or tensors[key].dtype).contiguous()
        if host.numel():
            yield memoryview(host.reshape(-1).view(torch.uint8).numpy())


def write_safetensors_to(
    out: BinaryIO,
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, str] | None = None,
    cast: torch.dtype | None = None,
) -> None:
    for chunk in safetensors_chunks(tensors, metadata, cast):
        out.write(chunk)


def write_safetensors(
    tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None, cast: torch.dtype | None = None
) -> bytes:
    buffer = io.BytesIO()
    write_safetensors_to(buffer, tensors, metadata, cast)
    return buffer.getvalue()


def _read_exact(stream: BinaryIO, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    filled = 0
    while filled < size:
        chunk = stream.read(min(size - filled, _READ_CHUNK))
        if not chunk:
            raise ValueError(f"safetensors data ends {size - filled} bytes early")
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    return data


def read_safetensors_from(stream: BinaryIO) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors (on the host) and metadata of a safetensors file read from `stream`, in one pass.
    A stream that is not one raises `ValueError`."""
    (length,) = struct.unpack("<Q", bytes(_read_exact(stream, 8)))
    if length > 100 * 1024 * 1024:
        raise ValueError(f"safetensors header of {length} bytes")
    header = json.loads(bytes(_read_exact(stream, length)))
    if not isinstance(header, dict):
        raise ValueError("safetensors header is not an object")
    metadata = {str(k): str(v) for k, v in (header.pop("__metadata__", None) or {}).items()}
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])
    tensors: dict[str, torch.Tensor] = {}
    position = 0
    for key, entry in entries:
        start, end = (int(x) for x in entry["data_offsets"])
        if start < position or end < start:
            raise ValueError(f"safetensors tensor {key} overlaps another")
        if start > position:
            _read_exact(stream, start - position)
        dtype = _TORCH_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"safetensors tensor {key} has dtype {entry['dtype']}")
        shape = [int(x) for x in entry["shape"]]
        data = _read_exact(stream, end - start)
        tensor = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
        tensors[key] = tensor.reshape(shape)
        position = end
    return tensors, metadata
