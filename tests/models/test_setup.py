"""Setup costs of cold shapes: learned per class, charged only where a shape is probably cold."""

from __future__ import annotations

import json

import pytest

from models.setup import WarmRoutes, expected_setup_ms, update_setup


def test_setup_is_learned_per_kind_and_mode_with_a_mode_fallback() -> None:
    stored = update_setup(None, [("matmul", "compiled", 150.0), ("matmul", "eager", 4.0)])
    assert expected_setup_ms(stored, "matmul", "compiled") == 150.0
    assert expected_setup_ms(stored, "attention", "compiled") == 150.0  # the mode's mean
    assert expected_setup_ms(stored, "matmul", "eager") == 4.0
    again = update_setup(stored, [("matmul", "compiled", 50.0)])
    assert expected_setup_ms(again, "matmul", "compiled") == pytest.approx(0.7 * 150 + 0.3 * 50)
    assert again["matmul/compiled"]["n"] == 2
    assert expected_setup_ms(stored, "matmul", "compiled") == 150.0  # input left alone
    assert json.loads(json.dumps(again)) == again


def test_nothing_measured_charges_nothing_and_bad_values_are_ignored() -> None:
    assert expected_setup_ms(None, "matmul", "compiled") == 0.0
    stored = update_setup({}, [("matmul", "compiled", float("nan")), ("matmul", "eager", -1.0)])
    assert stored == {} and expected_setup_ms(stored, "matmul", "eager") == 0.0


def test_warm_routes_are_per_class_and_bounded_least_recent_first_out() -> None:
    warm = WarmRoutes(capacity=2)
    a, b, c = ("s-a", "fp32", "eager"), ("s-b", "fp32", "eager"), ("s-c", "fp32", "eager")
    warm.mark("cpu", a)
    assert warm.is_warm("cpu", a) and not warm.is_warm("gpu", a)
    warm.mark("cpu", b)
    warm.mark("cpu", a)  # used again: b is now the oldest
    warm.mark("cpu", c)
    assert warm.is_warm("cpu", a) and warm.is_warm("cpu", c) and not warm.is_warm("cpu", b)
