"""Framing of docs/engine-protocol.md: a u32 LE header length, a JSON header, then raw buffers.

Tensors cross as `{"$tensor": i, "dtype", "shape"}` references to buffers and byte strings as
`{"$bytes": i}` (G2). `decode_value` turns references into numpy arrays / bytes; `Encoder` does the
reverse while building an answer.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from .errors import ProtocolError

# A header beyond this is a framing error, not a request (a corrupt length would otherwise allocate GBs).
MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_BUFFER_BYTES = 1 << 40

DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
}


@dataclass
class Frame:
    header: dict[str, Any]
    buffers: list[bytes] = field(default_factory=list)


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            if remaining == size:
                return None
            raise ProtocolError(f"stream ended {remaining} bytes short of a {size}-byte read")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> Frame | None:
    """The next frame, or None at a clean end of stream (between frames)."""
    prefix = _read_exact(stream, 4)
    if prefix is None:
        return None
    (length,) = struct.unpack("<I", prefix)
    if length > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {length} bytes exceeds {MAX_HEADER_BYTES}")
    raw = _read_exact(stream, length)
    if raw is None:
        raise ProtocolError("stream ended inside a frame header")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProtocolError(f"frame header is not UTF-8 JSON: {error}") from error
    if not isinstance(header, dict):
        raise ProtocolError("frame header must be a JSON object")
    lengths = header.get("buffers") or []
    if not isinstance(lengths, list) or not all(isinstance(n, int) and 0 <= n <= MAX_BUFFER_BYTES for n in lengths):
        raise ProtocolError("header.buffers must be an array of byte lengths")
    buffers: list[bytes] = []
    for n in lengths:
        data = _read_exact(stream, n) if n > 0 else b""
        if data is None:
            raise ProtocolError("stream ended inside a frame's buffers")
        buffers.append(data)
    return Frame(header, buffers)


def write_frame(stream: BinaryIO, frame: Frame) -> None:
    header = dict(frame.header)
    header["buffers"] = [len(b) for b in frame.buffers]
    raw = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    stream.write(struct.pack("<I", len(raw)))
    stream.write(raw)
    for buffer in frame.buffers:
        stream.write(buffer)
    stream.flush()


def decode_value(value: Any, buffers: list[bytes], used: set[int] | None = None) -> Any:
    """The header value with every `$tensor` made a numpy array and every `$bytes` made bytes."""
    seen = used if used is not None else set()
    if isinstance(value, list):
        return [decode_value(item, buffers, seen) for item in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        index = _buffer_index(value["$tensor"], buffers, seen)
        dtype_name = value.get("dtype")
        if dtype_name not in DTYPES:
            raise ProtocolError(f"tensor dtype {dtype_name!r} is not one of {', '.join(DTYPES)}")
        shape = value.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ProtocolError("tensor shape must be an array of non-negative integers")
        dtype = DTYPES[dtype_name]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        data = buffers[index]
        if len(data) != count * dtype.itemsize:
            raise ProtocolError(
                f"tensor of shape {shape} and dtype {dtype_name} needs {count * dtype.itemsize} bytes, "
                f"buffer {index} has {len(data)}"
            )
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if "$bytes" in value:
        return buffers[_buffer_index(value["$bytes"], buffers, seen)]
    return {key: decode_value(item, buffers, seen) for key, item in value.items()}


def _buffer_index(index: Any, buffers: list[bytes], used: set[int]) -> int:
    if not isinstance(index, int) or not 0 <= index < len(buffers):
        raise ProtocolError(f"buffer reference {index!r} is outside the frame's {len(buffers)} buffers")
    if index in used:
        raise ProtocolError(f"buffer {index} is referenced twice")
    used.add(index)
    return index


class Encoder:
    """Collects the buffers of one outgoing frame while its header is built."""

    def __init__(self) -> None:
        self.buffers: list[bytes] = []

    def tensor(self, array: np.ndarray) -> dict[str, Any]:
        for name, dtype in DTYPES.items():
            if array.dtype == dtype or array.dtype == dtype.newbyteorder("="):
                data = np.ascontiguousarray(array, dtype=dtype)
                self.buffers.append(data.tobytes())
                return {"$tensor": len(self.buffers) - 1, "dtype": name, "shape": list(array.shape)}
        raise TypeError(f"no wire dtype for {array.dtype}")

    def bytes(self, data: bytes) -> dict[str, Any]:
        self.buffers.append(bytes(data))
        return {"$bytes": len(self.buffers) - 1}
