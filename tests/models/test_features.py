"""Property tests for the cost-model features."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.features import BIAS_INDEX, FEATURE_NAMES, N_FEATURES, PRIOR_INDEX, featurize
from models.ops import OP_KINDS, PRECISIONS, Variant, parse_op
from tests.models._cost_fixtures import op_and_variant

priors = st.one_of(st.none(), st.floats(min_value=-20, max_value=20, allow_nan=False))


@settings(max_examples=150, deadline=None)
@given(pair=op_and_variant(), prior=priors)
def test_features_are_finite_with_fixed_length(pair, prior) -> None:
    op, variant = pair
    x = featurize(op, variant, prior)
    assert x.shape == (N_FEATURES,) == (len(FEATURE_NAMES),)
    assert x.dtype == np.float64
    assert np.all(np.isfinite(x))
    assert x[BIAS_INDEX] == 1.0
    assert x[PRIOR_INDEX] == (0.0 if prior is None else prior)


@settings(max_examples=100, deadline=None)
@given(pair=op_and_variant())
def test_one_hots_mark_exactly_the_kind_precision_and_mode(pair) -> None:
    op, variant = pair
    x = featurize(op, variant)
    names = dict(zip(FEATURE_NAMES, x, strict=True))
    assert sum(names[f"kind={k}"] for k in OP_KINDS) == 1.0
    assert names[f"kind={op.kind}"] == 1.0
    assert sum(names[f"precision={p}"] for p in PRECISIONS) == 1.0
    assert names[f"precision={variant.precision}"] == 1.0
    assert names["mode=compiled"] == (1.0 if variant.mode == "compiled" else 0.0)
    for k in OP_KINDS:  # the size slope is switched on for the op's own kind only
        assert names[f"log10_flops@kind={k}"] == (names["log10_flops"] if k == op.kind else 0.0)


@settings(max_examples=50, deadline=None)
@given(pair=op_and_variant(), prior=priors)
def test_inputs_not_mutated_and_output_deterministic(pair, prior) -> None:
    op, variant = pair
    before = (copy.deepcopy(op), copy.deepcopy(variant))
    first = featurize(op, variant, prior)
    second = featurize(op, variant, prior)
    assert (op, variant) == before
    np.testing.assert_array_equal(first, second)
    first[0] = 99.0  # callers own their vector: mutating it must not leak into later calls
    assert featurize(op, variant, prior)[0] == 1.0


def test_size_features_are_centred_log10() -> None:
    op = parse_op({"kind": "matmul", "m": 100, "k": 100, "n": 100})
    x = dict(zip(FEATURE_NAMES, featurize(op, Variant("fp32")), strict=True))
    assert x["log10_flops"] == pytest.approx(math.log10(2e6) - 8.0)
    assert x["log10_bytes"] == pytest.approx(math.log10(3 * 1e4 * 4) - 6.0)
    assert x["log10_intensity"] == pytest.approx(
        x["log10_flops"] - x["log10_bytes"] + 8.0 - 6.0 - 1.0
    )


def test_half_precision_moves_fewer_bytes() -> None:
    op = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64})
    names = list(FEATURE_NAMES)
    fp32 = featurize(op, Variant("fp32"))
    bf16 = featurize(op, Variant("bf16"))
    at = names.index("log10_bytes")
    assert bf16[at] == pytest.approx(fp32[at] - math.log10(2))


def test_rejects_non_finite_prior() -> None:
    op = parse_op({"kind": "softmax", "rows": 4, "dim": 4})
    with pytest.raises(ValueError):
        featurize(op, Variant("fp32"), float("inf"))
