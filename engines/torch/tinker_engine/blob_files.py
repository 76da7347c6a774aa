"""Blobs as files (docs/engine-protocol.md, "Blobs as files"): the worker names a path on this host and
the engine writes the blob there (answering its size and SHA-256) or reads it from there, so a state or
an export never crosses the pipe, and neither side holds it whole in memory.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any, BinaryIO

from .errors import InfrastructureError, ProtocolError

# What `hello` answers in `features` when the ops below take `path`.
BLOB_FILES_FEATURE = "blob_files"


class _HashingWriter:
    """Writes through to a file, counting and hashing the bytes on the way."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        self._out.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._out.flush()


def path_arg(args: dict[str, Any], key: str = "path") -> str | None:
    """`args[key]` when given: an absolute path. None when absent or null."""
    path = args.get(key)
    if path is None:
        return None
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ProtocolError(f"{key}: must be an absolute file path or null")
    return path


def write_blob_file(path: str, write: Callable[[BinaryIO], None]) -> dict[str, Any]:
    """Writes the blob to `path` (created or truncated) and answers `{size, sha256}`."""
    try:
        with open(path, "wb") as out:
            writer = _HashingWriter(out)
            write(writer)  # type: ignore[arg-type]
    except OSError as error:
        raise InfrastructureError(f"path: cannot write {path}: {error.strerror}") from error
    return {"size": writer.size, "sha256": writer.digest.hexdigest()}


def open_blob_file(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as error:
        raise InfrastructureError(f"path: cannot read {path}: {error.strerror}") from error
