"""The StarPU-style history model and its power-law regression."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.history import CALIBRATE_MINIMUM, HistoryCostModel, HistoryModel, fit_power_law
from models.ops import Variant, parse_op

FP32 = Variant("fp32")
BF16 = Variant("bf16")


def matmul(n: int):
    return parse_op({"kind": "matmul", "m": n, "k": n, "n": n})


times = st.lists(st.floats(min_value=1e-3, max_value=1e4, allow_nan=False), min_size=1, max_size=50)


@settings(max_examples=50, deadline=None)
@given(values=times)
def test_running_mean_and_variance_match_numpy(values: list[float]) -> None:
    history = HistoryModel()
    for v in values:
        history.observe("c", matmul(8), FP32, v)
    assert history.count("c", matmul(8), FP32) == len(values)
    assert history.mean_ms("c", matmul(8), FP32) == pytest.approx(np.mean(values), rel=1e-9)
    std = history.std_ms("c", matmul(8), FP32)
    if len(values) < 2:
        assert std is None
    else:
        assert std == pytest.approx(np.std(values, ddof=1), rel=1e-6, abs=1e-9)


def test_entries_are_keyed_by_shape_class_and_variant() -> None:
    history = HistoryModel()
    history.observe("a", matmul(8), FP32, 1.0)
    history.observe("a", matmul(8), BF16, 2.0)
    history.observe("b", matmul(8), FP32, 3.0)
    history.observe("a", matmul(16), FP32, 4.0)
    assert history.mean_ms("a", matmul(8), FP32) == 1.0
    assert history.mean_ms("a", matmul(8), BF16) == 2.0
    assert history.mean_ms("b", matmul(8), FP32) == 3.0
    assert history.mean_ms("b", matmul(16), FP32) is None


def test_calibrated_after_the_starpu_minimum() -> None:
    history = HistoryModel()
    for i in range(CALIBRATE_MINIMUM):
        assert history.expected_ms("c", matmul(8), FP32) is None
        assert not history.is_calibrated("c", matmul(8), FP32)
        history.observe("c", matmul(8), FP32, 2.0 + i % 2)
    assert history.is_calibrated("c", matmul(8), FP32)
    assert history.expected_ms("c", matmul(8), FP32) == pytest.approx(2.5)


def test_power_law_recovers_a_size_b_plus_c() -> None:
    sizes = np.geomspace(1e3, 1e8, 25)
    law = fit_power_law(sizes, 3e-6 * sizes**1.3 + 0.2, np.ones_like(sizes))
    assert law is not None
    a, b, c = law
    assert a == pytest.approx(3e-6, rel=0.05) and b == pytest.approx(1.3, abs=0.01)
    assert c == pytest.approx(0.2, rel=0.05)
    assert fit_power_law(sizes[:2], sizes[:2], np.ones(2)) is None


def test_sizes_too_close_for_a_slope_give_no_law_rather_than_an_overflow() -> None:
    # A slope of about -1e10 between sizes 1e-10 apart: ln a ~ 7e10, past any double.
    sizes = np.array([1000.0, 1000.0000001, 1000.0000002])
    assert fit_power_law(sizes, np.array([3.0, 2.0, 1.0]), np.ones(3)) is None


def test_a_slope_too_steep_for_a_float_gives_no_law_rather_than_a_zero_a() -> None:
    # Times tripling between sizes 1 % apart: b ~ 112, a = e^-1540, 0.0 as a float, and
    # regression_ms took its log (the cost-model benchmark crashed on one held-out draw).
    sizes = np.array([1e6, 1.01e6, 1.02e6])
    assert fit_power_law(sizes, np.array([1.0, 3.0, 9.0]), np.ones(3)) is None


def test_power_law_from_history_predicts_unseen_sizes() -> None:
    history = HistoryModel()
    for n in (32, 64, 128, 256, 512):
        op = matmul(n)
        for _ in range(3):
            history.observe("c", op, FP32, 1e-6 * op.flops() + 0.01)
    unseen = matmul(300)
    assert history.regression_ms("c", unseen, FP32) == pytest.approx(
        1e-6 * unseen.flops() + 0.01, rel=0.02
    )
    assert history.regression_ms("c", unseen, BF16) is None
    assert history.power_law("c", "softmax", FP32) is None


def test_entries_are_bounded_least_recently_updated_first() -> None:
    history = HistoryModel(max_entries=3)
    for n in (1, 2, 3):
        history.observe("c", matmul(n), FP32, 1.0)
    history.observe("c", matmul(1), FP32, 1.0)  # refresh the oldest
    history.observe("c", matmul(4), FP32, 1.0)
    assert len(history.entries) == 3
    assert history.count("c", matmul(2), FP32) == 0
    assert history.count("c", matmul(1), FP32) == 2


@settings(max_examples=30, deadline=None)
@given(left=times, right=times)
def test_merge_equals_observing_everything(left: list[float], right: list[float]) -> None:
    a, b, both = HistoryModel(), HistoryModel(), HistoryModel()
    for v in left:
        a.observe("c", matmul(8), FP32, v, energy_j=v / 10)
        both.observe("c", matmul(8), FP32, v, energy_j=v / 10)
    for v in right:
        b.observe("c", matmul(8), FP32, v)
        both.observe("c", matmul(8), FP32, v)
    a.merge(b)
    assert a.entries.keys() == both.entries.keys()
    for key, entry in both.entries.items():
        assert a.entries[key] == pytest.approx(entry, rel=1e-6, abs=1e-6)


def test_subset_and_json_round_trip() -> None:
    history = HistoryModel()
    history.observe("a", matmul(8), FP32, 1.0, energy_j=0.5)
    history.observe("b", matmul(8), FP32, 2.0)
    only_a = history.subset("a")
    assert only_a.count("b", matmul(8), FP32) == 0 and only_a.count("a", matmul(8), FP32) == 1
    restored = HistoryModel.from_dict(json.loads(json.dumps(history.to_dict())))
    assert restored.entries == history.entries
    assert restored.version == history.version == 2
    assert (
        restored.energy_j("a", matmul(8), FP32) == 0.5
        and restored.energy_j("b", matmul(8), FP32) is None
    )


def test_history_cost_model_modes() -> None:
    hist_model = HistoryCostModel("sim-h100", mode="history")
    law_model = HistoryCostModel("sim-h100", mode="powerlaw")
    cold = hist_model.predict_one(matmul(64), FP32)
    assert cold.mean_ms > 0 and cold.std_ms == pytest.approx(cold.mean_ms)  # roofline, 100%
    rows = [
        (matmul(n), FP32, 1e-6 * matmul(n).flops() + 0.01 + 0.001 * (n % 3), None)
        for n in (32, 64, 128, 256, 512)
        for _ in range(4)
    ]
    hist_model.learn_many(rows)
    law_model.learn_many(rows)
    seen, unseen = matmul(64), matmul(300)
    assert hist_model.predict_one(seen, FP32).mean_ms == pytest.approx(
        1e-6 * seen.flops() + 0.011, rel=0.01
    )
    assert law_model.predict_one(unseen, FP32).mean_ms == pytest.approx(
        1e-6 * unseen.flops() + 0.01, rel=0.05
    )
    assert hist_model.samples == 20 and hist_model.version == 1
    with pytest.raises(ValueError):
        HistoryCostModel("x", mode="nope")
