"""Public face of the op catalog: validation (`parse_op`), variants, references, inputs.

The spec classes, constants and FLOP/byte formulas live in :mod:`models.opspecs` and are
re-exported here; import everything from ``models.ops``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from models.opspecs import (  # re-exported: the public names of the catalog
    ACTIVATIONS,
    DEFAULT_MAX_ELEMENTS,
    DTYPES,
    INT8_KINDS,
    MAX_DIM,
    MAX_MLP_LAYERS,
    MODES,
    OP_KINDS,
    PRECISION_BYTES,
    PRECISIONS,
    SPEC_CLASSES,
    AttentionSpec,
    BmmSpec,
    Conv2dSpec,
    LayernormSpec,
    LinearSpec,
    MatmulSpec,
    MlpSpec,
    Mode,
    OpKind,
    OpSpec,
    Precision,
    SoftmaxSpec,
)

__all__ = [
    "ACTIVATIONS",
    "DEFAULT_MAX_ELEMENTS",
    "DTYPES",
    "INT8_KINDS",
    "MAX_DIM",
    "MAX_MLP_LAYERS",
    "MODES",
    "OP_KINDS",
    "PRECISION_BYTES",
    "PRECISIONS",
    "SPEC_CLASSES",
    "AttentionSpec",
    "BmmSpec",
    "Conv2dSpec",
    "LayernormSpec",
    "LinearSpec",
    "MatmulSpec",
    "MlpSpec",
    "Mode",
    "OpKind",
    "OpSpec",
    "Precision",
    "SoftmaxSpec",
    "SpecError",
    "Variant",
    "batched_equivalent",
    "evaluate",
    "make_inputs",
    "parse_op",
    "reference",
    "supports_precision",
]


class SpecError(ValueError):
    """An op, tensor or workload that breaks the contract; the message is the human reason."""


@dataclass(frozen=True)
class Variant:
    """How an op is executed: compute precision and eager/compiled mode."""

    precision: str
    mode: str = "eager"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise SpecError(f"unknown precision {self.precision!r}; expected one of {PRECISIONS}")
        if self.mode not in MODES:
            raise SpecError(f"unknown mode {self.mode!r}; expected one of {MODES}")

    def to_dict(self) -> dict[str, str]:
        return {"precision": self.precision, "mode": self.mode}

    @classmethod
    def from_dict(cls, obj: object) -> Variant:
        """Parse ``{"precision", "mode"?}``; raises SpecError on anything else."""
        if not isinstance(obj, dict):
            raise SpecError("variant must be an object with precision and mode")
        precision, mode = obj.get("precision"), obj.get("mode", "eager")
        if not isinstance(precision, str) or not isinstance(mode, str):
            raise SpecError("variant precision and mode must be strings")
        return cls(precision, mode)

    def __str__(self) -> str:
        return f"{self.precision}/{self.mode}"


def supports_precision(kind: str, precision: str) -> bool:
    """Whether the contract defines ``kind`` at ``precision`` (int8 only for GEMM-shaped ops)."""
    if precision not in PRECISIONS or kind not in OP_KINDS:
        return False
    return precision != "int8" or kind in INT8_KINDS


_NON_NEGATIVE = frozenset({"padding"})
_BOOLS = frozenset({"bias", "causal"})


def _check_int(kind: str, name: str, value: object) -> int:
    # bool is a subclass of int in Python; `true` as a dimension is a client bug, not 1.
    if type(value) is not int:
        raise SpecError(
            f"{kind}.{name} must be an integer, got {type(value).__name__} {value!r:.40}"
        )
    low = 0 if name in _NON_NEGATIVE else 1
    if value < low:
        raise SpecError(f"{kind}.{name} must be >= {low}, got {value}")
    if value > MAX_DIM:
        raise SpecError(f"{kind}.{name}={value} exceeds the per-dimension limit {MAX_DIM}")
    return value


def _check_field(kind: str, name: str, value: object) -> object:
    if name == "dtype":
        if value not in DTYPES:
            raise SpecError(f"unsupported dtype {value!r:.40}; expected one of {DTYPES}")
        return value
    if name == "activation":
        if value not in ACTIVATIONS:
            raise SpecError(f"unknown activation {value!r:.40}; expected one of {ACTIVATIONS}")
        return value
    if name in _BOOLS:
        if not isinstance(value, bool):
            raise SpecError(f"{kind}.{name} must be true or false, got {value!r:.40}")
        return value
    if name == "dims":
        if not isinstance(value, list | tuple):
            raise SpecError(f"{kind}.dims must be a list of integers")
        if not 2 <= len(value) <= MAX_MLP_LAYERS + 1:
            raise SpecError(
                f"{kind}.dims must have 2 to {MAX_MLP_LAYERS + 1} entries, got {len(value)}"
            )
        return tuple(_check_int(kind, f"dims[{i}]", v) for i, v in enumerate(value))
    return _check_int(kind, name, value)


P = TypeVar("P")


class ParseCache(Generic[P]):
    """What a parser returned for JSON values it already checked, keyed by the value's exact
    description (each field with its type, so that 1, 1.0 and true stay apart: `typed_key`).
    Bounded (cleared when full): descriptions come from input. A key that is not hashable (a
    list among the fields) is checked every time, never remembered."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._parsed: dict[object, P] = {}

    def __len__(self) -> int:
        return len(self._parsed)

    def clear(self) -> None:
        self._parsed.clear()

    def get(self, key: object, parse: Callable[[], P]) -> P:
        """The remembered result for ``key``, else ``parse()`` (remembered)."""
        try:
            parsed = self._parsed.get(key)
        except TypeError:
            return parse()
        if parsed is None:
            parsed = parse()
            if len(self._parsed) >= self._size:
                self._parsed.clear()
            self._parsed[key] = parsed
        return parsed


def typed_key(obj: dict[str, Any]) -> tuple[tuple[str, type, Any], ...]:
    """``obj``'s fields as (name, type, value), in order: a `ParseCache` key."""
    return tuple((k, type(v), v) for k, v in obj.items())


# Specs already checked, with their limit: traffic repeats its shapes, and checking every
# field again was a fifth of parsing a workload. Specs are frozen, so one instance is shared.
_PARSED_SIZE = 4096
_PARSED: ParseCache[OpSpec] = ParseCache(_PARSED_SIZE)


def parse_op(obj: object, max_elements: int = DEFAULT_MAX_ELEMENTS) -> OpSpec:
    """Validate a JSON op description and return its typed spec.

    Raises SpecError for a non-object, unknown kind, unknown/missing fields, non-integer, bool,
    zero or negative dimensions, unknown dtype or activation, a conv2d with no output, or more
    than ``max_elements`` elements across inputs and output.
    """
    if not isinstance(obj, dict):
        return _parse_op(obj, max_elements)
    return _PARSED.get((max_elements, typed_key(obj)), lambda: _parse_op(obj, max_elements))


def _parse_op(obj: object, max_elements: int) -> OpSpec:
    if not isinstance(obj, dict):
        raise SpecError(f"op must be a JSON object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in SPEC_CLASSES:
        raise SpecError(f"unknown op kind {kind!r:.40}; expected one of {OP_KINDS}")
    cls = SPEC_CLASSES[kind]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in obj if k != "kind" and k not in fields)
    if unknown:
        raise SpecError(f"{kind} has unknown field(s) {', '.join(unknown)[:200]}")
    values: dict[str, object] = {}
    for name, f in fields.items():
        if name not in obj:
            if f.default is dataclasses.MISSING:
                raise SpecError(f"{kind} is missing field {name!r}")
            continue
        values[name] = _check_field(kind, name, obj[name])
    spec: OpSpec = cls(**values)  # type: ignore[assignment]  # cls is one of the OpSpec members
    if isinstance(spec, Conv2dSpec):
        oh, ow = spec.out_hw()
        if oh < 1 or ow < 1:
            raise SpecError(
                f"conv2d output would be {oh}x{ow}: kernel {spec.kernel} does not fit "
                f"{spec.height}x{spec.width} with padding {spec.padding}"
            )
    total = spec.elements()
    if total > max_elements:
        raise SpecError(
            f"{kind} needs {total} elements (inputs + output), over the limit {max_elements}"
        )
    return spec


def reference(spec: OpSpec, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The float64 NumPy answer, with the contract's exact semantics."""
    return spec._evaluate({k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()})


def evaluate(spec: OpSpec, inputs: dict[str, np.ndarray], dtype: Any = np.float32) -> np.ndarray:
    """The same computation in another NumPy dtype (the NumPy runtime's kernel)."""
    return spec._evaluate({k: np.asarray(v, dtype=dtype) for k, v in inputs.items()})


def _input_scale(spec: OpSpec, name: str) -> float:
    """Std of a generated input so every output stays O(1) (weights ~ 1/sqrt(fan-in))."""
    shape = spec.input_shapes()[name]
    if name in ("weight", "b") or name.startswith("w") and name[1:].isdigit():
        fan_in = math.prod(shape[1:]) if name != "b" else shape[-2]
        return 1.0 / math.sqrt(fan_in)
    if name == "bias":
        return 0.1
    return 1.0


def batched_equivalent(spec: OpSpec, size: int) -> OpSpec | None:
    """The one op a batched call of ``size`` workloads of ``spec`` computes, where the catalog
    has one: ``size`` matmuls stacked are a bmm, bmms a bmm of ``b * size``, attentions an
    attention of ``batch * size``, layernorms and softmaxes one of ``rows * size``. None for
    linear, mlp and conv2d, whose stacked workloads each bring their own weights (no op of the
    catalog takes a weight per batch row). What the cost models learn a batched call as."""
    if size == 1:
        return spec
    if isinstance(spec, MatmulSpec):
        return BmmSpec(b=size, m=spec.m, k=spec.k, n=spec.n, dtype=spec.dtype)
    if isinstance(spec, BmmSpec):
        return dataclasses.replace(spec, b=spec.b * size)
    if isinstance(spec, AttentionSpec):
        return dataclasses.replace(spec, batch=spec.batch * size)
    if isinstance(spec, LayernormSpec | SoftmaxSpec):
        return dataclasses.replace(spec, rows=spec.rows * size)
    return None


# make_inputs draws at most this many values per input and repeats them: a prime, so that no
# two rows of a matrix whose width is below it start at the same place of the block.
INPUT_PERIOD = 8191


def make_inputs(spec: OpSpec, seed: int) -> dict[str, np.ndarray]:
    """Deterministic inputs from ``seed``: N(0, scale^2) float32 values cast to ``spec.dtype``,
    ``INPUT_PERIOD`` of them drawn per input and repeated in C order to fill it.

    Each input has its own stream (SeedSequence spawn key = its position), so the arrays do not
    depend on which other inputs exist, and every runtime gets identical bytes. Drawing every
    value cost ~4.6 ms per MB on this project's machine (Intel Xeon, 2026-12-07): 35 ms to make
    a BERT-base QKV projection's inputs, which runs in 1.4-4.5 ms, so an executor's "handling"
    outweighed the execution the router compares; repeating a block costs ~0.1 ms per MB. A
    dense kernel's time does not depend on which normal values it is given.
    """
    out: dict[str, np.ndarray] = {}
    for index, (name, shape) in enumerate(spec.input_shapes().items()):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(index,))))
        size = math.prod(shape)
        block = rng.standard_normal(min(size, INPUT_PERIOD), dtype=np.float32)
        block *= np.float32(_input_scale(spec, name))
        values = block.reshape(shape) if size <= INPUT_PERIOD else np.resize(block, shape)
        out[name] = values.astype(spec.dtype, copy=False)
    return out
