"""Inline tensors on the wire, and the output checksum.

Wire form (workload ``"inputs": {name: T}`` and result ``"output": T``)::

    T = {"dtype": "float32" | "float16" | "float64",
         "shape": [d0, d1, ...],            # every dimension >= 1
         "data_b64": "<base64 of the raw little-endian bytes, C (row-major) order>"}

Checksum definition (result field ``"checksum"``): ``"sha256:"`` followed by the lowercase hex
SHA-256 digest of the output converted to float32 and laid out as little-endian, C-order bytes.
The shape is not hashed (the op fixes it). Example: a float32 ``[[1, 2]]`` output hashes the 8
bytes ``00 00 80 3f 00 00 00 40``. Two runs give the same checksum only if every float32 bit is
equal, so it identifies an exact answer (a re-delivered duplicate, a reproducible variant), not
closeness to the reference.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math

import numpy as np

from models.ops import SpecError
from models.opspecs import DTYPES

MAX_RANK = 8
_WIRE_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in DTYPES}


def _shape(obj: object) -> tuple[int, ...]:
    if not isinstance(obj, list) or not 1 <= len(obj) <= MAX_RANK:
        raise SpecError(f"tensor shape must be a list of 1 to {MAX_RANK} integers")
    for d in obj:
        if type(d) is not int or d < 1:
            raise SpecError(f"tensor shape entries must be integers >= 1, got {d!r:.40}")
    return tuple(obj)


def decode_tensor(obj: object, max_elements: int) -> np.ndarray:
    """Decode a wire tensor into a writable native-order array of its dtype.

    Raises SpecError for a malformed object, unsupported dtype, more than ``max_elements``
    elements, invalid base64, a byte length that is not ``prod(shape) * itemsize``, or
    non-finite values. The size is checked before anything is decoded.
    """
    if not isinstance(obj, dict) or set(obj) != {"dtype", "shape", "data_b64"}:
        raise SpecError("tensor must be an object with exactly dtype, shape and data_b64")
    dtype_name, data = obj["dtype"], obj["data_b64"]
    if not isinstance(dtype_name, str) or dtype_name not in _WIRE_DTYPES:
        raise SpecError(f"unsupported tensor dtype {dtype_name!r:.40}; expected one of {DTYPES}")
    shape = _shape(obj["shape"])
    count = math.prod(shape)
    if count > max_elements:
        raise SpecError(f"inline tensor has {count} elements, over the limit {max_elements}")
    if not isinstance(data, str):
        raise SpecError("tensor data_b64 must be a base64 string")
    wire = _WIRE_DTYPES[dtype_name]
    expected = count * wire.itemsize
    # Reject by length first: decoding a huge string only to find it wrong costs memory.
    if len(data) != 4 * math.ceil(expected / 3):
        raise SpecError(
            f"tensor data is {len(data)} base64 chars; shape {list(shape)} of {dtype_name} "
            f"needs {expected} bytes ({4 * math.ceil(expected / 3)} chars)"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpecError(f"tensor data_b64 is not valid base64: {exc}") from None
    if len(raw) != expected:
        raise SpecError(f"tensor data has {len(raw)} bytes, expected {expected}")
    array = np.frombuffer(bytearray(raw), dtype=wire).reshape(shape)
    array = array.astype(wire.newbyteorder("="), copy=False)
    if not np.isfinite(array).all():
        raise SpecError("inline tensor contains NaN or infinity")
    return array


def encode_tensor(arr: np.ndarray) -> dict[str, object]:
    """Encode an array (float32/float16/float64) as a wire tensor."""
    name = np.dtype(arr.dtype).name
    if name not in _WIRE_DTYPES:
        raise SpecError(f"cannot encode dtype {name}; expected one of {DTYPES}")
    if arr.ndim == 0:
        arr = arr.reshape(1)
    raw = np.ascontiguousarray(arr, dtype=_WIRE_DTYPES[name]).tobytes()
    return {"dtype": name, "shape": list(arr.shape), "data_b64": base64.b64encode(raw).decode()}


def checksum(arr: np.ndarray) -> str:
    """``"sha256:<hex>"`` of the array as little-endian float32 C-order bytes (see module doc)."""
    raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
    return "sha256:" + hashlib.sha256(raw).hexdigest()
