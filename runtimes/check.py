"""Correctness against the float64 reference, with one tolerance per precision.

The error is ``max |out - ref| / max |ref|`` (relative to the output's scale, so near-zero
entries do not blow it up). Tolerances are a few times the worst error measured on the test
shapes (inputs from ``make_inputs``, outputs O(1)): fp32 ~2e-7, fp16 ~7e-4, bf16 ~6e-3,
int8 (dynamic, per-tensor or per-row scales) ~1.7e-2; tf32 keeps a 10-bit mantissa like fp16.
"""

from __future__ import annotations

import numpy as np

TOLERANCE: dict[str, float] = {
    "fp32": 1e-5,
    "tf32": 5e-3,
    "bf16": 3e-2,
    "fp16": 5e-3,
    "int8": 6e-2,
}


def relative_error(out: np.ndarray | None, ref: np.ndarray) -> float:
    """``max |out - ref| / max |ref|``; inf when there is no output, shapes differ or the
    output is not finite."""
    if out is None or out.shape != ref.shape or not np.isfinite(out).all():
        return float("inf")
    scale = max(float(np.max(np.abs(ref))), 1e-12)
    return float(np.max(np.abs(out.astype(np.float64) - ref))) / scale


def within_tolerance(out: np.ndarray | None, ref: np.ndarray, precision: str) -> tuple[bool, float]:
    """(ok, error) of ``out`` against the float64 ``ref`` at ``precision``'s tolerance."""
    error = relative_error(out, ref)
    return error <= TOLERANCE[precision], error
