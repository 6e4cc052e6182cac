"""bench/priors.py's scoring of cold priors against a profile (pure logic, fabricated
profiles: no runtime runs here)."""

from __future__ import annotations

import math

import pytest

from bench.priors import ARMS, _score
from models.costmodel import CostModel
from models.ops import Variant, parse_op
from models.priors import REFERENCE_OPS, kernel_key, prior_for_class

SOFTMAX = parse_op({"kind": "softmax", "rows": 4096, "dim": 2048})


def _row(device_class: str, softmax_ms: float, kernel_ms: float | None) -> dict:
    kernels = None if kernel_ms is None else {
        REFERENCE_OPS["softmax"].signature(): {"fp32": kernel_ms}}
    return {"device_class": device_class, "calibration": {"fp32": 50.0}, "kernel_ms": kernels,
            "profile": {f"{SOFTMAX.signature()}|fp32/eager": softmax_ms}}


def test_the_kernels_arm_ranks_by_the_reference_op() -> None:
    """Two classes alike in matmul rate: only the kernels arm sees that one softmax is 4x the
    other's, so only it picks the fast one every time; the other arms tie and miss more."""
    rows = {"torch": _row("torch-cpu-x86", 20.0, 5.0),
            "numpy": _row("numpy-cpu-x86", 80.0, 20.0)}
    scores = _score(rows, [SOFTMAX])
    assert set(scores) == set(ARMS)
    kernels = scores["rates+kernels"]
    assert kernels["options"] == 2 and kernels["decisions"] == 2  # fp32, and fp32 or bf16
    assert kernels["top1"] == 1.0 and kernels["regret_mean"] == 1.0
    assert kernels["miss_median"] < scores["rates"]["miss_median"]


def test_a_miss_is_the_larger_of_the_two_ratios() -> None:
    """A prior at exactly a quarter of the measured time misses by 4x."""
    predicted = math.exp(CostModel("numpy-cpu-x86", prior_for_class(
        "numpy-cpu-x86", {"fp32": 50.0})).predict_one(SOFTMAX, Variant("fp32")).log_mean)
    rows = {"numpy": _row("numpy-cpu-x86", predicted * 4, None)}
    assert _score(rows, [SOFTMAX])["rates"]["miss_median"] == pytest.approx(4.0)
    assert kernel_key("softmax", "fp32") == "softmax/fp32"
