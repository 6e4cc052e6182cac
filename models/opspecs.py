"""Op specs: one frozen dataclass per op kind of the contract, with FLOP and byte formulas.

Pure domain logic (NumPy only). Every spec exposes the same surface:

- ``kind``, ``dtype`` (storage dtype of inputs/outputs on the wire; compute precision is a
  separate :class:`Variant`);
- ``input_shapes()`` / ``output_shape()`` with the contract's input names;
- ``flops()``: multiply and add counted separately (a k-long dot product is 2k FLOPs).
  Elementwise costs are nominal and documented per kind: 1 FLOP per element for an activation,
  5 per element for softmax (max, subtract, exp, sum, divide) and for layernorm (mean, centre,
  square, sum, scale). Attention counts the full ``s x s`` score matrix even when causal, which
  is what non-flash kernels compute;
- ``bytes_moved(precision)``: every input read once and the output written once, at the
  precision's element size (the roofline's compulsory traffic);
- ``arithmetic_intensity(precision)`` = flops / bytes_moved;
- ``to_dict()`` (round-trips through :func:`parse_op`) and ``signature()`` (stable text used as a
  history key).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np

from models import kernels

OpKind = Literal["matmul", "bmm", "linear", "conv2d", "attention", "layernorm", "softmax", "mlp"]
Precision = Literal["fp32", "tf32", "bf16", "fp16", "int8"]
Mode = Literal["eager", "compiled"]
OP_KINDS: tuple[str, ...] = get_args(OpKind)
PRECISIONS: tuple[str, ...] = get_args(Precision)
MODES: tuple[str, ...] = get_args(Mode)
DTYPES: tuple[str, ...] = ("float32", "float16", "float64")
ACTIVATIONS: tuple[str, ...] = ("none", "relu", "gelu", "tanh", "silu")
# tf32 keeps fp32 storage (only the tensor-core multiply rounds), so it moves 4 bytes/element.
PRECISION_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "int8": 1}
# Dynamic quantization only exists for GEMM-shaped layers (torch quantize_dynamic: nn.Linear).
INT8_KINDS: frozenset[str] = frozenset({"linear", "matmul", "mlp"})
DEFAULT_MAX_ELEMENTS = 2**28
MAX_DIM = 2**31 - 1  # int32 indexing limit of most kernels
MAX_MLP_LAYERS = 16


def prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


@dataclass(frozen=True)
class _OpBase:
    kind: ClassVar[str]

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def output_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def flops(self) -> float:
        raise NotImplementedError

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def activated(self) -> tuple[str, int]:
        """(the activation, the elements it is applied to); ("none", 0) for a kind without
        one."""
        return "none", 0

    def elements(self) -> int:
        """Total elements of all inputs plus the output (what the size cap bounds)."""
        return sum(prod(s) for s in self.input_shapes().values()) + prod(self.output_shape())

    def bytes_moved(self, precision: str) -> float:
        return float(self.elements() * PRECISION_BYTES[precision])

    def arithmetic_intensity(self, precision: str) -> float:
        return self.flops() / self.bytes_moved(precision)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def signature(self) -> str:
        """``kind:field=value,...``: the op's identity as text (memoised: the history model
        and the caches key every learned row by it)."""
        return _signature(self)


@functools.lru_cache(maxsize=8192)
def _signature(spec: _OpBase) -> str:
    parts = []
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if isinstance(value, tuple):
            value = "x".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = int(value)
        parts.append(f"{f.name}={value}")
    return f"{spec.kind}:" + ",".join(parts)


def _act_flops(act: str, elements: int) -> int:
    return 0 if act == "none" else elements


@dataclass(frozen=True)
class MatmulSpec(_OpBase):
    kind: ClassVar[str] = "matmul"
    m: int
    k: int
    n: int
    dtype: str = "float32"

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"a": (self.m, self.k), "b": (self.k, self.n)}

    def output_shape(self) -> tuple[int, ...]:
        return (self.m, self.n)

    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return x["a"] @ x["b"]


@dataclass(frozen=True)
class BmmSpec(_OpBase):
    kind: ClassVar[str] = "bmm"
    b: int
    m: int
    k: int
    n: int
    dtype: str = "float32"

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"a": (self.b, self.m, self.k), "b": (self.b, self.k, self.n)}

    def output_shape(self) -> tuple[int, ...]:
        return (self.b, self.m, self.n)

    def flops(self) -> float:
        return 2.0 * self.b * self.m * self.k * self.n

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return x["a"] @ x["b"]


@dataclass(frozen=True)
class LinearSpec(_OpBase):
    kind: ClassVar[str] = "linear"
    batch: int
    in_features: int
    out_features: int
    bias: bool = True
    activation: str = "none"
    dtype: str = "float32"

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {
            "x": (self.batch, self.in_features),
            "weight": (self.out_features, self.in_features),
        }
        if self.bias:
            shapes["bias"] = (self.out_features,)
        return shapes

    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.out_features)

    def flops(self) -> float:
        outputs = self.batch * self.out_features
        gemm = 2.0 * outputs * self.in_features
        return gemm + (outputs if self.bias else 0) + _act_flops(self.activation, outputs)

    def activated(self) -> tuple[str, int]:
        return self.activation, self.batch * self.out_features

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return kernels.linear(x["x"], x["weight"], x.get("bias"), self.activation)


@dataclass(frozen=True)
class Conv2dSpec(_OpBase):
    kind: ClassVar[str] = "conv2d"
    batch: int
    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel: int
    stride: int = 1
    padding: int = 0
    dtype: str = "float32"

    def out_hw(self) -> tuple[int, int]:
        """Output height and width (floor division, as every framework does)."""
        oh = (self.height + 2 * self.padding - self.kernel) // self.stride + 1
        ow = (self.width + 2 * self.padding - self.kernel) // self.stride + 1
        return oh, ow

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {
            "x": (self.batch, self.in_channels, self.height, self.width),
            "weight": (self.out_channels, self.in_channels, self.kernel, self.kernel),
        }

    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.out_channels, *self.out_hw())

    def flops(self) -> float:
        oh, ow = self.out_hw()
        per_output = 2.0 * self.in_channels * self.kernel * self.kernel
        return per_output * self.batch * self.out_channels * oh * ow

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return kernels.conv2d(x["x"], x["weight"], self.stride, self.padding)


@dataclass(frozen=True)
class AttentionSpec(_OpBase):
    kind: ClassVar[str] = "attention"
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    causal: bool = False
    dtype: str = "float32"

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        shape = (self.batch, self.heads, self.seq_len, self.head_dim)
        return {"q": shape, "k": shape, "v": shape}

    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.heads, self.seq_len, self.head_dim)

    def flops(self) -> float:
        scores = float(self.batch * self.heads * self.seq_len * self.seq_len)
        # q @ k^T and p @ v: 2*d each per score; softmax 5 per score.
        return scores * (4.0 * self.head_dim + 5.0)

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return kernels.attention(x["q"], x["k"], x["v"], self.causal)


@dataclass(frozen=True)
class LayernormSpec(_OpBase):
    kind: ClassVar[str] = "layernorm"
    rows: int
    dim: int
    dtype: str = "float32"

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"x": (self.rows, self.dim)}

    def output_shape(self) -> tuple[int, ...]:
        return (self.rows, self.dim)

    def flops(self) -> float:
        return 5.0 * self.rows * self.dim

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return kernels.layernorm(x["x"])


@dataclass(frozen=True)
class SoftmaxSpec(_OpBase):
    kind: ClassVar[str] = "softmax"
    rows: int
    dim: int
    dtype: str = "float32"

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"x": (self.rows, self.dim)}

    def output_shape(self) -> tuple[int, ...]:
        return (self.rows, self.dim)

    def flops(self) -> float:
        return 5.0 * self.rows * self.dim

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return kernels.softmax(x["x"])


@dataclass(frozen=True)
class MlpSpec(_OpBase):
    kind: ClassVar[str] = "mlp"
    batch: int
    dims: tuple[int, ...]
    activation: str = "relu"
    dtype: str = "float32"

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {"x": (self.batch, self.dims[0])}
        for i in range(len(self.dims) - 1):
            shapes[f"w{i}"] = (self.dims[i + 1], self.dims[i])
        return shapes

    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.dims[-1])

    def flops(self) -> float:
        total = 0.0
        for i in range(len(self.dims) - 1):
            total += 2.0 * self.batch * self.dims[i] * self.dims[i + 1]
            if i < len(self.dims) - 2:
                total += _act_flops(self.activation, self.batch * self.dims[i + 1])
        return total

    def activated(self) -> tuple[str, int]:
        # between layers, not after the last
        return self.activation, sum(self.batch * d for d in self.dims[1:-1])

    def _evaluate(self, x: dict[str, np.ndarray]) -> np.ndarray:
        weights = [x[f"w{i}"] for i in range(len(self.dims) - 1)]
        return kernels.mlp(x["x"], weights, self.activation)


OpSpec = (
    MatmulSpec
    | BmmSpec
    | LinearSpec
    | Conv2dSpec
    | AttentionSpec
    | LayernormSpec
    | SoftmaxSpec
    | MlpSpec
)
SPEC_CLASSES: dict[str, type[_OpBase]] = {
    cls.kind: cls
    for cls in (
        MatmulSpec,
        BmmSpec,
        LinearSpec,
        Conv2dSpec,
        AttentionSpec,
        LayernormSpec,
        SoftmaxSpec,
        MlpSpec,
    )
}
# Fields that are not positive dimensions; everything else typed int must be >= 1.
