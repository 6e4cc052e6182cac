"""The metric stage's batch learning equals the row-by-row forms it replaced: the regression's
indexed update (distinct feature vectors + a row index), the vectorised drift EWMA and error
tracker, and `CostModel.learn_indexed` against `learn_many` and sequential learning."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.costmodel import CostModel
from models.ops import Variant
from models.regression import BayesLinReg, ErrorTracker, ewma_path
from tests.models._cost_fixtures import random_mixed_ops, roofline_world

CPU_WORLD = roofline_world(60e9, 15e9, 0.02, {"attention": 3.0, "softmax": 2.0})
VARIANTS = (Variant("fp32"), Variant("bf16"), Variant("fp32", "compiled"))


def _state(reg: BayesLinReg) -> dict:
    return reg.to_dict()


def _assert_same_regression(a: BayesLinReg, b: BayesLinReg, rtol: float = 1e-9) -> None:
    sa, sb = _state(a), _state(b)
    for key in ("precision_upper", "eta"):
        np.testing.assert_allclose(sa[key], sb[key], rtol=rtol, atol=1e-9)
    for key in ("innov_sum", "innov_weight", "drift", "shift"):
        assert sa[key] == pytest.approx(sb[key], rel=rtol, abs=1e-9), key
    assert (sa["rows"], sa["drift_events"]) == (sb["rows"], sb["drift_events"])


@pytest.mark.parametrize("shift_at", [None, 700])
def test_indexed_update_equals_the_dense_update(shift_at: int | None) -> None:
    """Few distinct vectors, many rows, with outliers (Huber weights, drift events inside a
    chunk) and, in one case, a 4x slowdown."""
    rng = np.random.default_rng(21)
    distinct = np.column_stack([np.ones(6), rng.normal(size=(6, 4))])
    index = rng.integers(6, size=1500)
    w = np.array([0.5, 1.0, -0.5, 0.25, 0.1])
    y = distinct[index] @ w + rng.normal(scale=0.1, size=1500)
    y[rng.integers(1500, size=20)] += 2.0  # outliers
    if shift_at is not None:
        y[shift_at:] += math.log(4.0)
    dense, indexed = (BayesLinReg(np.zeros(5), np.full(5, 2.0), 0.3) for _ in range(2))
    mu_d, sd_d, mu_i, sd_i = [], [], [], []
    for start in range(0, 1500, 500):  # three metric batches
        part = slice(start, start + 500)
        m, s = dense.update(distinct[index[part]], y[part])
        mu_d.append(m), sd_d.append(s)
        m, s = indexed.update(distinct, y[part], index=index[part])
        mu_i.append(m), sd_i.append(s)
    _assert_same_regression(dense, indexed)
    np.testing.assert_allclose(np.concatenate(mu_d), np.concatenate(mu_i), rtol=1e-9)
    np.testing.assert_allclose(np.concatenate(sd_d), np.concatenate(sd_i), rtol=1e-9)
    assert dense.drift_events > 0  # the outliers (and the slowdown) fired the detector


def test_indexed_update_refuses_an_index_out_of_range() -> None:
    reg = BayesLinReg(np.zeros(3), np.ones(3), 0.5)
    with pytest.raises(ValueError, match="index"):
        reg.update(np.ones((2, 3)), np.ones(3), index=np.array([0, 1, 2]))
    with pytest.raises(ValueError):
        reg.update(np.ones((2, 3)), np.ones(2), index=np.array([0, 1, 1]))


@pytest.mark.parametrize("alpha", [0.3, 0.05, 0.95, 1.0])
def test_ewma_path_equals_the_row_loop(alpha: float) -> None:
    values = np.random.default_rng(3).normal(size=2000)  # long enough to go in pieces at 0.95
    level, expected = 0.7, []
    for v in values:
        level += alpha * (v - level)
        expected.append(level)
    np.testing.assert_allclose(ewma_path(values, 0.7, alpha), expected, rtol=1e-12, atol=1e-12)


def test_error_tracker_batch_equals_one_by_one() -> None:
    rng = np.random.default_rng(8)
    actual = rng.lognormal(size=300)
    predicted = actual * rng.lognormal(sigma=0.2, size=300)
    batch, single = ErrorTracker(), ErrorTracker()
    for start in range(0, 300, 97):
        batch.add_many(predicted[start:start + 97], actual[start:start + 97])
    for p, a in zip(predicted, actual, strict=True):
        single.add_many(np.array([p]), np.array([a]))
    assert batch.count == single.count == 300
    assert batch.ewma == pytest.approx(single.ewma, rel=1e-12)
    np.testing.assert_allclose(list(batch.ring), list(single.ring), rtol=1e-12)


def _rows(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    ops = random_mixed_ops(rng, 12)  # a fleet runs few distinct shapes
    rows = []
    for i in range(n):
        op, variant = ops[i % len(ops)], VARIANTS[(i // len(ops)) % len(VARIANTS)]
        ms = CPU_WORLD(op, variant) * math.exp(rng.normal(0.0, 0.15))
        rows.append((op, variant, ms, None if i % 3 else 25.0 * ms / 1e3))
    return rows


def test_learn_indexed_equals_learn_many_and_stays_close_to_sequential() -> None:
    rows = _rows(900, 2)
    pairs = sorted({(op, v) for op, v, _, _ in rows}, key=repr)
    where = {pair: i for i, pair in enumerate(pairs)}
    indexed, many, sequential = (CostModel.for_class("torch-cpu-x86") for _ in range(3))
    for start in range(0, 900, 300):
        part = rows[start:start + 300]
        indexed.learn_indexed(
            pairs, np.array([where[(op, v)] for op, v, _, _ in part]),
            np.array([r[2] for r in part]),
            np.array([np.nan if r[3] is None else r[3] for r in part]))
        many.learn_many(part)
    for row in rows:
        sequential.learn_one(*row)
    _assert_same_regression(indexed.time, many.time)
    assert indexed.energy is not None and many.energy is not None
    _assert_same_regression(indexed.energy, many.energy)
    assert indexed.error_summary() == pytest.approx(many.error_summary())
    assert indexed.samples == sequential.samples == 900
    # Batch against one row at a time: the regressions equal but for the Huber weights of
    # outlying rows. The exact-shape corrections (models/local_residuals.py) are residuals
    # against the regression after each learn call, so they depend on the batching a little.
    for op, v in pairs:
        x = indexed.features(op, v)
        assert indexed.time.moments(x)[0] == pytest.approx(sequential.time.moments(x)[0],
                                                           abs=0.03)
        a, b = indexed.predict_one(op, v), sequential.predict_one(op, v)
        assert a.mean_ms == pytest.approx(b.mean_ms, rel=0.06)
        assert a.energy_j == pytest.approx(b.energy_j, rel=0.03)


def test_learn_indexed_refuses_a_bad_time_before_any_change() -> None:
    rows = _rows(10, 4)
    model = CostModel.for_class("torch-cpu-x86")
    before = model.to_dict()
    times = np.array([r[2] for r in rows])
    times[7] = -1.0
    with pytest.raises(ValueError, match="row 7"):
        model.learn_indexed([(op, v) for op, v, _, _ in rows], np.arange(10), times)
    assert model.to_dict() == before
