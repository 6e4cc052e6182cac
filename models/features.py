"""Op/variant features of format 1: the SGD comparator (`models.sgd_model`) and the
benchmark's gradient-boosting comparator use them; `models.costmodel.CostModel` has its own,
`models.shape_features` (format 6).

A feature vector describes *what* is computed (FLOPs, bytes, arithmetic intensity, op kind,
and a per-kind size slope) and *how* (precision, eager/compiled mode), plus the roofline prior
of the device class in the same unit as the regression target (natural log of milliseconds). With the prior as a feature,
a cost model that puts weight 1 on it and 0 elsewhere *is* the roofline; learning then only
has to correct it (per kind, per precision, per size), which needs far fewer samples than
learning the time from scratch.
"""

from __future__ import annotations

import math

import numpy as np

from models.ops import MODES, OP_KINDS, PRECISIONS, OpSpec, Variant

__all__ = ["FEATURE_NAMES", "N_FEATURES", "PRIOR_INDEX", "BIAS_INDEX", "featurize"]

# Centres of the log10 size features: a mid-sized op (1e8 FLOPs, 1e6 bytes, intensity 10).
# Centring keeps the bias weight from absorbing the size slopes, so a zero-mean prior on
# the slopes means "no size correction" near typical ops, and the posterior stays well
# conditioned.
LOG10_FLOPS_CENTRE = 8.0
LOG10_BYTES_CENTRE = 6.0
LOG10_INTENSITY_CENTRE = 1.0

FEATURE_NAMES: tuple[str, ...] = (
    "bias",
    "log10_flops",
    "log10_bytes",
    "log10_intensity",
    "prior_log_ms",
    *(f"kind={k}" for k in OP_KINDS),
    *(f"precision={p}" for p in PRECISIONS),
    *(f"mode={m}" for m in MODES if m != "eager"),
    # The size slope of each kind (log10 FLOPs where the kind is this one, else 0): real
    # runtimes reach their peak rate at different sizes per kind (dispatch overhead, BLAS
    # blocking). Measured on NumPy/torch CPU timings this cut the median error 19% -> 15%.
    *(f"log10_flops@kind={k}" for k in OP_KINDS),
)
N_FEATURES = len(FEATURE_NAMES)
BIAS_INDEX = 0
PRIOR_INDEX = FEATURE_NAMES.index("prior_log_ms")
_KIND_INDEX = {k: FEATURE_NAMES.index(f"kind={k}") for k in OP_KINDS}
_PRECISION_INDEX = {p: FEATURE_NAMES.index(f"precision={p}") for p in PRECISIONS}
_MODE_INDEX = {m: FEATURE_NAMES.index(f"mode={m}") for m in MODES if m != "eager"}
_SLOPE_INDEX = {k: FEATURE_NAMES.index(f"log10_flops@kind={k}") for k in OP_KINDS}


def _safe_log10(value: float) -> float:
    # A degenerate op (0 FLOPs, e.g. a size-0 edge) must still give a finite feature.
    return math.log10(max(float(value), 1.0))


def featurize(op: OpSpec, variant: Variant, prior_log_ms: float | None = None) -> np.ndarray:
    """The feature vector of ``op`` run as ``variant`` (length ``N_FEATURES``, float64).

    ``prior_log_ms`` is the device class's roofline estimate, ``ln(ms)``; None gives 0.0
    (a model without a prior learns the time from the other features alone). Raises
    ValueError for an unknown kind, precision or mode, or a non-finite prior.
    """
    try:
        kind_at = _KIND_INDEX[op.kind]
        precision_at = _PRECISION_INDEX[variant.precision]
    except KeyError as exc:
        raise ValueError(f"cannot featurize {op.kind!r} as {variant}: unknown {exc}") from None
    if variant.mode != "eager" and variant.mode not in _MODE_INDEX:
        raise ValueError(f"unknown mode {variant.mode!r}")
    prior = 0.0 if prior_log_ms is None else float(prior_log_ms)
    if not math.isfinite(prior):
        raise ValueError(f"prior_log_ms must be finite, got {prior_log_ms}")
    flops = _safe_log10(op.flops())
    moved = _safe_log10(op.bytes_moved(variant.precision))
    x = np.zeros(N_FEATURES)
    x[BIAS_INDEX] = 1.0
    x[1] = flops - LOG10_FLOPS_CENTRE
    x[2] = moved - LOG10_BYTES_CENTRE
    x[3] = (flops - moved) - LOG10_INTENSITY_CENTRE
    x[PRIOR_INDEX] = prior
    x[kind_at] = 1.0
    x[_SLOPE_INDEX[op.kind]] = x[1]
    x[precision_at] = 1.0
    if variant.mode != "eager":
        x[_MODE_INDEX[variant.mode]] = 1.0
    return x
