"""Framing (docs/engine-protocol.md, "Framing") and the handshake."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from tinker_engine.engine import Engine
from tinker_engine.errors import ProtocolError
from tinker_engine.protocol import Encoder, Frame, decode_value, read_frame, write_frame
from tinker_engine.server import answer, serve


def test_a_frame_round_trips_tensors_and_bytes() -> None:
    encoder = Encoder()
    header = {
        "id": 3,
        "op": "x",
        "args": {
            "a": encoder.tensor(np.arange(6, dtype=np.float32).reshape(3, 2)),
            "b": [encoder.tensor(np.array([1, -2], dtype=np.int64)), encoder.bytes(b"\x00\xffraw")],
            "n": 1.5,
        },
    }
    stream = io.BytesIO()
    write_frame(stream, Frame(header, encoder.buffers))
    stream.seek(0)
    frame = read_frame(stream)
    assert frame is not None and frame.header["buffers"] == [24, 16, 5]
    args = decode_value(frame.header["args"], frame.buffers)
    assert args["a"].dtype == np.float32 and args["a"].shape == (3, 2)
    np.testing.assert_array_equal(args["a"], np.arange(6, dtype=np.float32).reshape(3, 2))
    np.testing.assert_array_equal(args["b"][0], [1, -2])
    assert args["b"][1] == b"\x00\xffraw" and args["n"] == 1.5
    assert read_frame(stream) is None


def test_the_wire_layout_is_length_header_then_buffers() -> None:
    stream = io.BytesIO()
    write_frame(stream, Frame({"id": 1}, [b"ab", b"c"]))
    raw = stream.getvalue()
    (length,) = struct.unpack("<I", raw[:4])
    assert raw[4 : 4 + length] == b'{"id":1,"buffers":[2,1]}'
    assert raw[4 + length :] == b"abc"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"$tensor": 0, "dtype": "float16", "shape": [1]}, "dtype"),
        ({"$tensor": 0, "dtype": "float32", "shape": [3]}, "needs 12 bytes"),
        ({"$tensor": 5, "dtype": "float32", "shape": [1]}, "outside"),
        ([{"$bytes": 0}, {"$bytes": 0}], "referenced twice"),
    ],
)
def test_malformed_references_are_protocol_errors(value: object, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        decode_value(value, [b"\x00\x00\x80\x3f"])


def test_a_truncated_frame_is_a_protocol_error_and_stops_the_loop(engine: Engine) -> None:
    raw = struct.pack("<I", 40) + b'{"id": 1'
    out = io.BytesIO()
    assert serve(engine, io.BytesIO(raw), out) == 2
    out.seek(0)
    reply = read_frame(out)
    assert reply is not None and reply.header["error"]["kind"] == "protocol"


def test_a_version_mismatch_is_refused_with_the_versions_spoken(make_engine) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine()
    engine.greeted = False
    reply, stop = answer(engine, Frame({"id": 1, "op": "hello", "args": {"protocol_version": 3, "worker": "t"}}))
    assert not stop and reply is not None and reply.header["ok"] is False
    assert reply.header["error"]["kind"] == "protocol"
    assert "protocol_version 3" in reply.header["error"]["message"]
    assert "speaks 1, 2" in reply.header["error"]["message"]
    # Nothing else is served before a hello that succeeds.
    reply, _ = answer(engine, Frame({"id": 2, "op": "ping", "args": {}}))
    assert reply.header["error"]["kind"] == "protocol"
    reply, _ = answer(engine, Frame({"id": 3, "op": "hello", "args": {"protocol_version": 1, "worker": "t"}}))
    assert reply.header["ok"] is True and reply.header["result"]["protocol_version"] == 1
    assert reply.header["result"]["base_models"][0]["vocab_size"] == 256
    assert reply.header["result"]["base_models"][0]["max_context_length"] > 0


def test_unknown_ops_and_handles_are_protocol_errors(engine: Engine) -> None:
    reply, _ = answer(engine, Frame({"id": 1, "op": "teleport", "args": {}}))
    assert reply.header["error"]["kind"] == "protocol"
    reply, _ = answer(engine, Frame({"id": 2, "op": "serialize_state", "args": {"state": "s999"}}))
    assert reply.header["error"]["kind"] == "protocol" and "s999" in reply.header["error"]["message"]
