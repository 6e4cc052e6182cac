"""Efficiency-curve features of `models.costmodel.CostModel` (feature format 6).

ln(exec ms) of a real runtime is not a straight line in any size measure: a small op costs the
per-call overhead whatever its size, a large one its work over the rate the kernel reaches at
that size, and the rate itself steps down when the working set leaves a cache level. The
roofline prior (``prior_log_ms`` = ln(overhead + max(FLOPs / peak, bytes / bandwidth))) has
that shape with textbook constants; these features let a *linear* Bayesian regression bend it:

* ``work`` is ln of the roofline time without the overhead (ms), centred at 0.1 ms. The global
  curve is a smooth hinge basis on it (softplus at knots 10 µs ... 100 ms): where the overhead
  dominates the curve is flat, where the work dominates it has slope ~1, and the knee can sit
  wherever the measurements put it.
* Per op kind: an offset and a slope on ``work``: the kind's efficiency curve (how far below
  peak its kernels run, as a function of size). Per-kind hinges on top of the global ones
  were tried and changed nothing measurable (20.2 vs 20.5 % median error at 200 rows/class),
  nor did the log of each dim per kind (~1 point, for 2.5x the stored state).
* Per precision and mode: an offset and a slope (an emulated bf16 costs more per FLOP, a
  compiled variant less per call), and per kind an offset and a slope for a non-fp32
  precision and for the compiled mode (emulation and fusion gain differ by kind and size).
  The per-kind variant slopes took top-1 on held-out shapes from 66 to 80 % (200 rows per
  class) and on real model layers from 53 to 74 %: which variant wins flips with size, and
  differently per kind. Variant-specific hinges on top changed nothing measurable.
* Cache fit: softplus(log2(working set / cache size)) for each cache level of the class's
  prior device: zero while the operands fit, growing once they spill. Without them the
  error on real model layers (much larger weights than the random shapes) was 36.6 % instead
  of 34.0 % (200 rows/class), on held-out random shapes 19.6 % instead of 18.8 %.
* Alignment: the share of the op's dims (>= 8) that are multiples of 16 and of 64 (vector
  width and BLAS blocking): real model layers are aligned, random shapes mostly are not, so
  these weights are learned from few rows; a tight prior (0.1) keeps them from
  extrapolating (at 0.2 the layers' error was 34.0 %, at 0.1 32.5 %). 0.05 since the live
  prior noise went to 0.2 (models/costmodel.py NOISE_STD), which loosens every prior.

* Dispatch: an eager runtime pays a per-call cost for every primitive an op is made of
  (`eager_calls`: the matmul, the bias add, each primitive of the activation, the softmax's
  five...), and within one op kind that count moves with the bias, the activation, the MLP's
  layers and the causal mask: an exact-erf gelu is five more calls than none. The features
  are ln((c * calls + work) / (c + work)) at a per-call cost c of 5 µs and of 50 µs (the
  roofline's overhead counts one call already): ln(calls) where the calls dominate, 0 where
  the work does; a compiled variant (fused) gets its own weight on the second. Without them
  the error on held-out linear layers was 31 % instead of 19 %; over all held-out shapes,
  four folds, 18.7 % instead of 17.7 % and on real model layers 31.3 % instead of 30.0 %
  (200 rows per class, replayed from the cost-model benchmark's measurements).

* Smallest GEMM dim, per kind: ln(smallest dim / 64) of the GEMMs the op is made of (a
  convolution's as im2col lays it out, attention's min(seq, head_dim)), or the reduced dim
  of a softmax or layernorm. Two ops of the same work run at different rates when one is
  skinny: BLAS blocking and vectorisation run out along the short side. Within each
  (kind, class) the held-out residuals correlated with it by up to +0.7 (bmm, attention,
  numpy's MLP); 0 at 64.
* Eager traffic: ln(1 + t / work) with t the time, at the class's bandwidth, of the
  intermediates an eager run reads and writes beyond the roofline's inputs and output (the
  output again for each bias/activation primitive, attention's seq^2 scores through the
  scale, mask and softmax, a convolution's window copy; `eager_traffic_elements`); a
  compiled variant (fused) gets its own weight on it too.
  With both (format 3 -> 4), replayed on the cost-model benchmark's measurements at 200
  rows per class, six held-out draws: held-out median error 16.1 -> 14.9 %, model layers
  27.0 -> 25.4 % (1000 rows: 13.3 -> 12.0 %, 25.5 -> 22.3 %), top-1 unchanged.
* Smallest GEMM dim of a low-precision variant (format 5): the same ln(smallest dim / 64),
  once more for a non-fp32 precision, shared by the kinds. An emulated or converted bf16
  kernel (likely) packs and converts its operands per call, which a skinny GEMM amortises
  worst: torch's bf16 over fp32 was three quarters of the held-out top-1 misses (the pick
  flips near fp32 ~ 30-60 µs). Replayed on the cost-model benchmark's
  measurements (200 rows per class, five draws, 17 held-out splits, rng seeds 5-8, 10-22):
  held-out top-1 74.7 -> 74.6 %, median error 15.1 -> 14.9 %; model layers top-1
  83.8 -> 85.6 %, error 28.2 -> 27.9 %.
* Transcendental activations (format 6): per activation whose every element is an erf, exp
  or tanh (gelu, silu, tanh), ln(1 + elements x 1 ns / work), shared by the kinds that apply
  one (linear, mlp). What such an element costs is a constant of the runtime, far from the
  roofline's nominal FLOP and not memory traffic (NumPy's exact gelu goes through scipy's
  erf: a 1024 -> 2752 gelu linear took 1.5x the 2752 -> 1024 plain one in NumPy, 1.2x in
  torch); without its own weight the per-kind offset absorbed the gelu rows and
  overpredicted the plain ones.
  Learned from the random linears (their activations: none, relu, gelu), it carries to
  the model layers' gelu MLP, which no random MLP has. Replayed on the cost-model
  benchmark's measurements (`bench/out/costmodel.json`, 200 rows per class, five draws;
  prior std 1.0 ln units, 1 ns per element): held-out median error 16.4 -> 15.5 %, top-1
  91 -> 91 %; model layers 25.6 -> 24.2 %, top-1 43 -> 48 %; 16 other held-out splits
  (rng seeds 6-21) top-1 83.6 -> 84.3 %, error 17.5 -> 17.3 %. At 50 rows: held-out
  22.4 -> 22.4 %, top-1 77 -> 76 %, layers 33.6 -> 33.2 %, 44 -> 43 %; at 1000 rows:
  held-out 13.1 -> 13.6 %, 88 -> 88 %, layers 21.2 -> 21.3 %, 39 -> 42 %. (0.3 ns or a
  prior std of 0.3: a third to half of the gain; 3 ns: the same within noise.)
  Tried alongside, and not kept (200 rows, same replay, each against the format-6 row
  above unless said): ln(smallest GEMM dim / 64) shared by the GEMM kinds (the per-kind
  weight learns from ~12 random shapes of a kind, none with a conv's 64+ channels): held-out
  15.2 %, 89 %, layers 24.6 %, 44 %, CV 84.6 %; the vector-lane use of the GEMM's K and N
  dims (ln(d / (16 ceil(d / 16)))): layers 23.6 %, 46 %, held-out 16.0 %, 90 %; the
  roofline's compute / memory time ratio (saturating): within noise everywhere. None
  reaches the model layers' convolutions, overpredicted ~2.6x in torch and ~1.8x in NumPy:
  torch's random convolutions (4-32 channels) all took 3-13x their roofline time, the
  layers' (16-2048 channels, most 64+) 1.1-2.5x, and no feature of the random ones tells
  the two regimes apart.

Every feature is a pure function of (op, variant, prior device), so `CostModel` caches the
vector per (op, variant) and a prediction stays two dot products.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from models.ops import (
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
    OpSpec,
    SoftmaxSpec,
    Variant,
)

__all__ = [
    "FEATURE_FORMAT",
    "SHAPE_FEATURE_NAMES",
    "N_SHAPE_FEATURES",
    "BIAS_INDEX",
    "PRIOR_INDEX",
    "TRANSCENDENTAL_ACTIVATIONS",
    "eager_calls",
    "eager_traffic_elements",
    "smallest_dim",
    "shape_features",
    "feature_group",
]

# Bumped whenever the vector below changes meaning: a stored model of another format is
# rebuilt cold rather than read with its weights on the wrong features.
FEATURE_FORMAT = 6
# ln(0.1 ms): centring the work feature keeps the bias weight from absorbing the slopes.
WORK_CENTRE = math.log(0.1)
# Hinge knots of the global curve (ln ms of roofline work): 10 µs, 100 µs, 1 ms, 10 ms,
# 100 ms. One per decade: the measured knee (overhead vs work) of the CPU runtimes moves by
# about a decade between runtimes and modes.
GLOBAL_KNOTS: tuple[float, ...] = tuple(math.log(t) for t in (1e-2, 1e-1, 1.0, 10.0, 100.0))
# Activations whose every element is a transcendental function (erf, exp, tanh): what one costs
# per element is a constant of the runtime (NumPy's gelu calls scipy's erf), not memory traffic.
TRANSCENDENTAL_ACTIVATIONS: tuple[str, ...] = ("gelu", "silu", "tanh")
# The per-element cost (ms) the activation features are built at: ~1 ns, about an eager
# runtime's erf or exp per fp32 element on one core.
ACTIVATION_ELEMENT_MS = 1e-6
NON_SHAPE_FIELDS = frozenset({"kernel", "stride", "padding"})
_NON_EAGER = tuple(m for m in MODES if m != "eager")
SHAPE_FEATURE_NAMES: tuple[str, ...] = (
    "bias",
    "prior_log_ms",
    "work",
    *(f"hinge@{i}" for i in range(len(GLOBAL_KNOTS))),
    *(f"kind={k}" for k in OP_KINDS),
    *(f"work@kind={k}" for k in OP_KINDS),
    *(f"precision={p}" for p in PRECISIONS),
    *(f"work@precision={p}" for p in PRECISIONS),
    *(f"mode={m}" for m in _NON_EAGER),
    *(f"work@mode={m}" for m in _NON_EAGER),
    *(f"lowprec@kind={k}" for k in OP_KINDS),
    *(f"compiled@kind={k}" for k in OP_KINDS),
    *(f"work@lowprec@kind={k}" for k in OP_KINDS),
    *(f"work@compiled@kind={k}" for k in OP_KINDS),
    "spill_l1",
    "spill_l2",
    "spill_l3",
    "aligned16",
    "aligned64",
    "calls@5us",
    "calls@50us",
    "calls@compiled",
    *(f"small@kind={k}" for k in OP_KINDS),
    "traffic",
    "traffic@compiled",
    "small@lowprec",
    *(f"act={a}" for a in TRANSCENDENTAL_ACTIVATIONS),
)
N_SHAPE_FEATURES = len(SHAPE_FEATURE_NAMES)
BIAS_INDEX = 0
PRIOR_INDEX = 1
_INDEX = {name: i for i, name in enumerate(SHAPE_FEATURE_NAMES)}
_GLOBAL_HINGE_AT = _INDEX["hinge@0"]
_SPILL_AT = _INDEX["spill_l1"]


def feature_group(name: str) -> str:
    """The prior group of a feature name (what `models.costmodel` sets its prior std by)."""
    if name in ("bias", "prior_log_ms", "work"):
        return name
    if name.startswith("hinge@"):
        return "hinge"
    if name.startswith("small@"):
        return "small@kind"
    if name.startswith("act="):
        return "act"
    if name.startswith("work@") and name.count("@") == 2:
        return "work@variant@kind"
    if "@kind=" in name:
        return name.split("@", 1)[0].rstrip("0123456789") + "@kind"
    if name.startswith("work@"):
        return "work@variant"
    if name.startswith(("precision=", "mode=")):
        return "variant"
    if name.startswith("kind="):
        return "kind"
    if name.startswith("spill"):
        return "spill"
    if name.startswith("calls"):
        return "calls"
    if name.startswith("traffic"):
        return "traffic"
    return "aligned"


# Elementwise primitives an eager runtime runs for each activation (the contract's forms:
# exact-erf gelu is x / sqrt(2), erf, + 1, x *, * 0.5; silu x / (1 + exp(-x))).
ACTIVATION_CALLS = {"none": 0, "relu": 1, "tanh": 1, "silu": 4, "gelu": 5}
# The per-call costs the dispatch features are built at (ms): about an eager torch or NumPy
# call, and an eager JAX one; the regression weighs the two per class.
PER_CALL_MS: tuple[float, float] = (0.005, 0.05)
# The smallest GEMM dim at which `small@kind` is 0 (BLAS blocking works in tens of elements).
SMALL_DIM_CENTRE = 64.0
# The bandwidth the eager traffic is timed at when the caller gives none (the generic CPU's).
DEFAULT_MEM_BW_BYTES_S = 20e9
_SOFTMAX_CALLS = 5  # max, subtract, exp, sum, divide
_LAYERNORM_CALLS = 6  # mean, subtract, square, mean, add eps + rsqrt, multiply


def eager_calls(op: OpSpec) -> int:
    """How many primitive calls the op is, run eagerly as the contract writes it
    (models/kernels.py): each costs an eager runtime a dispatch, and within one op kind the
    count moves with the bias, the activation, the layers and the causal mask."""
    if isinstance(op, LinearSpec):
        return 1 + int(op.bias) + ACTIVATION_CALLS.get(op.activation, 1)
    if isinstance(op, MlpSpec):
        layers = len(op.dims) - 1
        return layers + (layers - 1) * ACTIVATION_CALLS.get(op.activation, 1)
    if isinstance(op, AttentionSpec):
        # two matmuls, the scale, the softmax; a causal mask builds and applies its triangle
        return 3 + _SOFTMAX_CALLS + (2 if op.causal else 0)
    if isinstance(op, SoftmaxSpec):
        return _SOFTMAX_CALLS
    if isinstance(op, LayernormSpec):
        return _LAYERNORM_CALLS
    if isinstance(op, Conv2dSpec):
        return 1 + int(op.padding > 0)
    return 1


def smallest_dim(op: OpSpec) -> float:
    """The smallest dim of the GEMMs an op is made of (M, K, N; a convolution's as im2col
    lays it out: batch x output pixels, in channels x kernel^2, out channels; an MLP's
    layers averaged in ln, weighted by their FLOPs), or the reduced dim of a softmax or
    layernorm: what a kernel's blocking and vectorisation run out of first."""
    if isinstance(op, LinearSpec):
        return float(min(op.batch, op.in_features, op.out_features))
    if isinstance(op, MlpSpec):
        pairs = list(zip(op.dims[:-1], op.dims[1:], strict=True))
        total = sum(a * b for a, b in pairs)
        return math.exp(sum(a * b * math.log(min(op.batch, a, b)) for a, b in pairs) / total)
    if isinstance(op, AttentionSpec):
        return float(min(op.seq_len, op.head_dim))
    if isinstance(op, SoftmaxSpec | LayernormSpec):
        return float(op.dim)
    if isinstance(op, Conv2dSpec):
        oh, ow = op.out_hw()
        return float(min(op.batch * oh * ow, op.in_channels * op.kernel**2, op.out_channels))
    if isinstance(op, MatmulSpec | BmmSpec):
        return float(min(op.m, op.k, op.n))
    raise ValueError(f"no dims for {op.kind!r}")


def eager_traffic_elements(op: OpSpec) -> float:
    """Elements an eager run reads and writes in intermediates, beyond its inputs and
    output (which the roofline counts): each elementwise primitive of a bias and an
    activation reads and writes the output; attention materialises its scores and runs the
    scale, the mask and the softmax's primitives over them; softmax and layernorm run
    their primitives over the whole input; a k x k convolution's windows are copied once
    (im2col, or NumPy's einsum)."""
    if isinstance(op, LinearSpec):
        calls = int(op.bias) + ACTIVATION_CALLS.get(op.activation, 1)
        return 2.0 * op.batch * op.out_features * calls
    if isinstance(op, MlpSpec):
        calls = ACTIVATION_CALLS.get(op.activation, 1)
        return sum(2.0 * op.batch * d * calls for d in op.dims[1:-1])
    if isinstance(op, AttentionSpec):
        scores = float(op.batch * op.heads * op.seq_len * op.seq_len)
        # written by q @ k^T, read by p @ v, and read and written by the scale, the softmax's
        # primitives and (causal) the mask
        return 2.0 * scores * (2 + _SOFTMAX_CALLS + int(op.causal))
    if isinstance(op, SoftmaxSpec):
        return 2.0 * op.rows * op.dim * (_SOFTMAX_CALLS - 1)
    if isinstance(op, LayernormSpec):
        return 2.0 * op.rows * op.dim * (_LAYERNORM_CALLS - 1)
    if isinstance(op, Conv2dSpec) and op.kernel > 1:
        oh, ow = op.out_hw()
        return float(op.batch * op.in_channels * op.kernel**2 * oh * ow)
    return 0.0


def _softplus(z: float) -> float:
    return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))


# Per kind, the spec fields that hold dims (computed once: dataclasses.fields per call was a
# fifth of the feature cache's miss path).
_SHAPE_FIELDS: dict[str, tuple[str, ...]] = {
    kind: tuple(f.name for f in dataclasses.fields(spec) if f.name not in NON_SHAPE_FIELDS)
    for kind, spec in SPEC_CLASSES.items()
}


def _dims(op: OpSpec) -> list[int]:
    """The op's tensor dims that alignment can matter for (>= 8; not kernel/stride/padding)."""
    out: list[int] = []
    for name in _SHAPE_FIELDS[op.kind]:
        value = getattr(op, name)
        values = value if isinstance(value, tuple) else (value,)
        out += [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 8]
    return out


def shape_features(
    op: OpSpec,
    variant: Variant,
    prior_log_ms: float,
    work_log_ms: float,
    cache_bytes: tuple[float, float, float],
    mem_bw_bytes_s: float = DEFAULT_MEM_BW_BYTES_S,
) -> np.ndarray:
    """The format-6 feature vector (length `N_SHAPE_FEATURES`, float64).

    ``prior_log_ms`` is the class's roofline time with overhead, ``work_log_ms`` without it
    (both ln ms); ``cache_bytes`` the L1, L2 and L3 sizes of the class's device and
    ``mem_bw_bytes_s`` its memory bandwidth (what the eager traffic is timed at). Raises
    ValueError for an unknown kind, precision or mode, or non-finite roofline times.
    """
    if op.kind not in OP_KINDS or variant.precision not in PRECISIONS:
        raise ValueError(f"cannot featurize {op.kind!r} as {variant}")
    if variant.mode != "eager" and variant.mode not in _NON_EAGER:
        raise ValueError(f"unknown mode {variant.mode!r}")
    if not (math.isfinite(prior_log_ms) and math.isfinite(work_log_ms)):
        raise ValueError("roofline times must be finite")
    x = np.zeros(N_SHAPE_FEATURES)
    work = work_log_ms - WORK_CENTRE
    x[BIAS_INDEX] = 1.0
    x[PRIOR_INDEX] = prior_log_ms
    x[_INDEX["work"]] = work
    for i, knot in enumerate(GLOBAL_KNOTS):
        x[_GLOBAL_HINGE_AT + i] = _softplus(work_log_ms - knot)
    kind = op.kind
    x[_INDEX[f"kind={kind}"]] = 1.0
    x[_INDEX[f"work@kind={kind}"]] = work
    x[_INDEX[f"precision={variant.precision}"]] = 1.0
    x[_INDEX[f"work@precision={variant.precision}"]] = work
    if variant.mode != "eager":
        x[_INDEX[f"mode={variant.mode}"]] = 1.0
        x[_INDEX[f"work@mode={variant.mode}"]] = work
        x[_INDEX[f"compiled@kind={kind}"]] = 1.0
        x[_INDEX[f"work@compiled@kind={kind}"]] = work
    if variant.precision != "fp32":
        x[_INDEX[f"lowprec@kind={kind}"]] = 1.0
        x[_INDEX[f"work@lowprec@kind={kind}"]] = work
    moved = max(op.bytes_moved(variant.precision), 1.0)
    for i, size in enumerate(cache_bytes):
        x[_SPILL_AT + i] = _softplus(math.log2(moved / max(size, 1.0)))
    dims = _dims(op)
    if dims:
        x[_INDEX["aligned16"]] = sum(d % 16 == 0 for d in dims) / len(dims)
        x[_INDEX["aligned64"]] = sum(d % 64 == 0 for d in dims) / len(dims)
    calls = eager_calls(op)
    work_ms = math.exp(work_log_ms)
    for name, per_call in zip(("calls@5us", "calls@50us"), PER_CALL_MS, strict=True):
        x[_INDEX[name]] = math.log((per_call * calls + work_ms) / (per_call + work_ms))
    if variant.mode != "eager":
        x[_INDEX["calls@compiled"]] = x[_INDEX["calls@50us"]]
    small = math.log(smallest_dim(op) / SMALL_DIM_CENTRE)
    x[_INDEX[f"small@kind={kind}"]] = small
    if variant.precision != "fp32":
        x[_INDEX["small@lowprec"]] = small
    activation, elements = op.activated()
    if elements and activation in TRANSCENDENTAL_ACTIVATIONS:
        x[_INDEX[f"act={activation}"]] = math.log1p(elements * ACTIVATION_ELEMENT_MS / work_ms)
    traffic_ms = (eager_traffic_elements(op) * PRECISION_BYTES[variant.precision]
                  / max(mem_bw_bytes_s, 1.0) * 1e3)
    x[_INDEX["traffic"]] = math.log1p(traffic_ms / work_ms)
    if variant.mode != "eager":
        x[_INDEX["traffic@compiled"]] = x[_INDEX["traffic"]]
    return x
