"""Tests for the mergeable latency sketch and window statistics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.sketch import LatencySketch, WindowStats

positive_values = st.lists(
    st.floats(min_value=1e-6, max_value=1e7, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=300,
)
quantiles = st.floats(min_value=0.0, max_value=1.0)


def _within_alpha(estimate: float, data: np.ndarray, q: float, alpha: float) -> bool:
    """DDSketch's guarantee: within alpha of the element of rank q*(n-1) (either neighbour)."""
    ordered = np.sort(data)
    rank = q * (len(ordered) - 1)
    lo, hi = ordered[int(np.floor(rank))], ordered[int(np.ceil(rank))]
    slack = alpha * 1.0000001
    return lo * (1 - slack) <= estimate <= hi * (1 + slack)


@settings(max_examples=60, deadline=None)
@given(values=positive_values, q=quantiles)
def test_quantile_within_relative_accuracy(values: list[float], q: float) -> None:
    sketch = LatencySketch()
    sketch.add_many(values)
    estimate = sketch.quantile(q)
    assert estimate is not None
    assert _within_alpha(estimate, np.asarray(values), q, sketch.alpha)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantiles_match_numpy_on_lognormal_latencies(seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = rng.lognormal(mean=1.0, sigma=1.5, size=20_000)
    sketch = LatencySketch()
    sketch.add_many(data)
    for q in (0.5, 0.9, 0.95, 0.99):
        exact = float(np.quantile(data, q))
        assert abs(sketch.quantile(q) - exact) / exact < 0.02


@settings(max_examples=40, deadline=None)
@given(a=positive_values, b=positive_values)
def test_merge_equals_adding_everything(a: list[float], b: list[float]) -> None:
    left, right, together = LatencySketch(), LatencySketch(), LatencySketch()
    left.add_many(a)
    right.add_many(b)
    together.add_many(a + b)
    left.merge(right)
    assert left.buckets == together.buckets
    assert left.count == together.count
    for q in (0.0, 0.5, 0.99, 1.0):
        assert left.quantile(q) == together.quantile(q)


@settings(max_examples=30, deadline=None)
@given(values=positive_values)
def test_add_many_equals_add_one_by_one(values: list[float]) -> None:
    batch, single = LatencySketch(), LatencySketch()
    batch.add_many(values)
    for v in values:
        single.add(v)
    assert batch.buckets == single.buckets and batch.count == single.count


def test_zero_values_and_empty() -> None:
    sketch = LatencySketch()
    assert sketch.quantile(0.5) is None
    sketch.add_many([0.0, 0.0, 5.0])
    assert sketch.quantile(0.0) == 0.0
    assert sketch.quantile(1.0) == pytest.approx(5.0, rel=0.01)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_rejects_bad_values(bad: float) -> None:
    with pytest.raises(ValueError):
        LatencySketch().add(bad)
    with pytest.raises(ValueError):
        LatencySketch().add_many([1.0, bad])


def test_bucket_count_is_bounded_and_tail_stays_accurate() -> None:
    sketch = LatencySketch(max_buckets=64)
    data = np.geomspace(1e-6, 1e6, 5_000)
    sketch.add_many(data)
    assert len(sketch.buckets) <= 64
    assert sketch.count == data.size
    exact = float(np.quantile(data, 0.99, method="lower"))
    assert abs(sketch.quantile(0.99) - exact) / exact < 0.02


@settings(max_examples=30, deadline=None)
@given(values=positive_values)
def test_serialisation_round_trip_through_json(values: list[float]) -> None:
    sketch = LatencySketch()
    sketch.add_many(values)
    restored = LatencySketch.from_dict(json.loads(json.dumps(sketch.to_dict())))
    assert restored.buckets == sketch.buckets
    assert restored.count == sketch.count
    assert restored.quantile(0.95) == sketch.quantile(0.95)


def test_merge_rejects_different_alpha() -> None:
    with pytest.raises(ValueError):
        LatencySketch(alpha=0.01).merge(LatencySketch(alpha=0.02))


def test_window_stats_summary() -> None:
    stats = WindowStats()
    stats.add_batch(
        [1.0, 2.0, 3.0, 100.0],
        errors=[False, False, False, True],
        energies=[0.5, None, float("nan"), 9.0],
    )
    stats.add_batch([4.0], errors=2)
    summary = stats.summary()
    assert summary["count"] == 7
    assert summary["errors"] == 3
    assert summary["mean_ms"] == pytest.approx(2.5)
    assert summary["min_ms"] == 1.0 and summary["max_ms"] == 4.0
    assert summary["p50_ms"] == pytest.approx(2.0, rel=0.02)
    assert summary["energy_j_mean"] == pytest.approx(0.5)


def test_window_stats_empty_summary_is_json_ready() -> None:
    summary = WindowStats().summary()
    assert summary["count"] == 0 and summary["mean_ms"] is None and summary["p99_ms"] is None
    json.dumps(summary)


@settings(max_examples=30, deadline=None)
@given(a=positive_values, b=positive_values)
def test_window_stats_merge_equals_add_all(a: list[float], b: list[float]) -> None:
    left, right, together = WindowStats(), WindowStats(), WindowStats()
    left.add_batch(a, energies=a)
    right.add_batch(b, errors=1)
    together.add_batch(a, energies=a)
    together.add_batch(b, errors=1)
    left.merge(right)
    assert left.summary() == pytest.approx(together.summary())
    restored = WindowStats.from_dict(json.loads(json.dumps(left.to_dict())))
    assert restored.summary() == left.summary()


def test_window_stats_rejects_misaligned_inputs() -> None:
    with pytest.raises(ValueError):
        WindowStats().add_batch([1.0, 2.0], errors=[True])
    with pytest.raises(ValueError):
        WindowStats().add_batch([1.0, 2.0], energies=[1.0])
