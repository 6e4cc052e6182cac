"""Inline tensors: wire round trip, strict decoding, the checksum definition."""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from models.ops import SpecError
from models.tensors import checksum, decode_tensor, encode_tensor


@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float16, np.float64]),
        shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5),
        elements=st.floats(-1e3, 1e3, width=16),
    )
)
def test_round_trip_is_bit_exact(arr: np.ndarray) -> None:
    wire = encode_tensor(arr)
    back = decode_tensor(wire, max_elements=10_000)
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()
    assert back.flags.writeable


def test_wire_bytes_are_little_endian() -> None:
    big_endian = np.array([1.0, 2.0], dtype=">f4")
    wire = encode_tensor(big_endian)
    assert base64.b64decode(wire["data_b64"]) == bytes.fromhex("0000803f00000040")
    assert wire == {"dtype": "float32", "shape": [2], "data_b64": "AACAPwAAAEA="}


def test_checksum_definition() -> None:
    out = np.array([[1.0, 2.0]], dtype=np.float32)
    expected = "sha256:" + hashlib.sha256(bytes.fromhex("0000803f00000040")).hexdigest()
    assert checksum(out) == expected
    # float64 and Fortran-ordered outputs hash as their float32 C-order bytes
    assert checksum(out.astype(np.float64)) == expected
    square = np.arange(4, dtype=np.float32).reshape(2, 2)
    assert checksum(np.asfortranarray(square)) == checksum(square)
    assert checksum(square) != checksum(square.T)


def _wire(**patch: object) -> dict[str, object]:
    base = encode_tensor(np.ones((2, 3), dtype=np.float32))
    base.update(patch)
    return base


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ("AAAA", "exactly dtype, shape and data_b64"),
        ({"dtype": "float32", "shape": [1]}, "exactly dtype, shape and data_b64"),
        (_wire(extra=1), "exactly dtype, shape and data_b64"),
        (_wire(dtype="int64"), "unsupported tensor dtype"),
        (_wire(dtype="bfloat16"), "unsupported tensor dtype"),
        (_wire(shape=[]), "1 to 8 integers"),
        (_wire(shape=[2, 0]), ">= 1"),
        (_wire(shape=[2, True]), ">= 1"),
        (_wire(shape=[2, 3.0]), ">= 1"),
        (_wire(shape=[1] * 9), "1 to 8 integers"),
        (_wire(shape=[3, 3]), "base64 chars"),
        (_wire(data_b64=12), "base64 string"),
        (_wire(data_b64="!" * 32), "not valid base64"),
        (_wire(shape=[4096, 4096]), "over the limit"),
        (encode_tensor(np.array([1.0, np.nan], dtype=np.float32)), "NaN or infinity"),
        (encode_tensor(np.array([np.inf], dtype=np.float16)), "NaN or infinity"),
    ],
)
def test_bad_tensors_are_refused_with_a_reason(obj: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        decode_tensor(obj, max_elements=1000)


def test_padding_mismatch_is_caught_after_decoding() -> None:
    # 24 bytes encode to 32 chars; a 32-char string of 23 bytes ("=" padded) must not pass.
    data = base64.b64encode(b"\0" * 23).decode()
    assert len(data) == 32
    with pytest.raises(SpecError, match="23 bytes, expected 24"):
        decode_tensor(_wire(data_b64=data), max_elements=100)


def test_encode_refuses_integer_arrays() -> None:
    with pytest.raises(SpecError):
        encode_tensor(np.arange(3))
