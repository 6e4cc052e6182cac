"""Setup costs of cold shapes: learned per class, charged only where a shape is probably cold."""

from __future__ import annotations

import json

import pytest

from models.setup import WarmRoutes, expected_setup, setup_share, update_setup


def test_setup_is_learned_per_kind_and_mode_with_a_mode_fallback() -> None:
    # (kind, mode, setup_ms, exec_ms): the first run's excess over the execution is learned.
    stored = update_setup(None, [("matmul", "compiled", 150.0, 1.0),
                                 ("matmul", "eager", 4.0, 3.0)])
    assert expected_setup(stored, "matmul", "compiled") == (149.0, 1.0)
    assert expected_setup(stored, "attention", "compiled") == (149.0, 1.0)  # the mode's mean
    assert expected_setup(stored, "matmul", "eager") == (1.0, 1.0)
    again = update_setup(stored, [("matmul", "compiled", 51.0, 1.0)])
    assert expected_setup(again, "matmul", "compiled")[0] == pytest.approx(0.7 * 149 + 0.3 * 50)
    assert again["matmul/compiled"]["n"] == 2
    assert expected_setup(stored, "matmul", "compiled") == (149.0, 1.0)  # input left alone
    assert json.loads(json.dumps(again)) == again


def test_an_eager_shape_is_charged_its_own_warm_up_not_the_kinds_largest() -> None:
    """torch's first runs measured here: 64³ 3.2 ms (exec 0.0), 512³ 4.5 (3.6), 1024³ 68 (31).
    The running mean of the setups (23 ms) was charged to every cold shape alike; the excess
    over the execution (lazy initialisation: 13 ms) plus one predicted execution charges the
    64³ one 13 ms and the 1024³ one 44."""
    stored = update_setup(None, [("matmul", "eager", 3.2, 0.0), ("matmul", "eager", 4.5, 3.6),
                                 ("matmul", "eager", 67.7, 30.7)])
    excess, runs = expected_setup(stored, "matmul", "eager")
    whole = stored["matmul/eager"]["ms"]
    assert whole == pytest.approx(22.8, abs=0.1) and excess == pytest.approx(12.9, abs=0.1)
    assert runs == 1.0
    assert excess + runs * 0.05 < 0.6 * whole  # the small shape: less than before
    assert excess + runs * 30.7 > 1.9 * whole  # the large one: its own warm-up run


def test_a_setup_stored_before_the_excess_reads_as_a_whole_setup() -> None:
    old = {"matmul/eager": {"ms": 36.0, "n": 5}, "eager": {"ms": 36.0, "n": 5}}
    assert expected_setup(old, "matmul", "eager") == (36.0, 0.0)
    # Its next measurement starts the excess over (the old mean has no excess to blend).
    new = update_setup(old, [("matmul", "eager", 3.2, 0.1)])
    assert expected_setup(new, "matmul", "eager") == (pytest.approx(3.1), 1.0)


def test_nothing_measured_charges_nothing_and_bad_values_are_ignored() -> None:
    assert expected_setup(None, "matmul", "compiled") == (0.0, 0.0)
    stored = update_setup({}, [("matmul", "compiled", float("nan"), 1.0),
                               ("matmul", "eager", -1.0, 1.0)])
    assert stored == {} and expected_setup(stored, "matmul", "eager") == (0.0, 0.0)


def test_warm_routes_are_per_class_and_bounded_least_recent_first_out() -> None:
    warm = WarmRoutes(capacity=2)
    a, b, c = ("s-a", "fp32", "eager"), ("s-b", "fp32", "eager"), ("s-c", "fp32", "eager")
    warm.mark("cpu", a)
    assert warm.is_warm("cpu", a) and not warm.is_warm("gpu", a)
    warm.mark("cpu", b)
    warm.mark("cpu", a)  # used again: b is now the oldest
    warm.mark("cpu", c)
    assert warm.is_warm("cpu", a) and warm.is_warm("cpu", c) and not warm.is_warm("cpu", b)


def test_warm_routes_count_each_shape_routed_to_any_class() -> None:
    warm = WarmRoutes(capacity=2)
    assert warm.routed("matmul:a") == 0 and setup_share(0) == 1.0
    warm.mark("torch-cpu-x", ("matmul:a", "fp32", "eager"))
    warm.mark("numpy-cpu-x", ("matmul:a", "fp32", "eager"))
    warm.mark("torch-cpu-x", ("matmul:a", "bf16", "eager"))
    assert warm.routed("matmul:a") == 3 and setup_share(3) == 0.25
    # Bounded: the least recently routed shapes go first.
    for i in range(40):
        warm.mark("torch-cpu-x", (f"matmul:{i}", "fp32", "eager"))
    assert warm.routed("matmul:a") == 0 and warm.routed("matmul:39") == 1
