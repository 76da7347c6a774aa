"""safetensors files with stable bytes: keys sorted, metadata sorted, no padding beyond the format's
8-byte alignment of the header. (The safetensors library orders metadata by a hash map, so the same
tensors can give different bytes per call.) Files are read back with `safetensors.torch.load`.
"""

from __future__ import annotations

import json
import struct

import torch

_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.bfloat16: "BF16"}


def write_safetensors(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    chunks: list[bytes] = []
    offset = 0
    for key in sorted(tensors):
        tensor = tensors[key].detach().to("cpu").contiguous()
        data = tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[key] = {
            "dtype": _DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(chunks)
