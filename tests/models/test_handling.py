"""An executor's handling around the execution, learned per class (models/handling.py)."""

from __future__ import annotations

import pytest

from models.handling import Handling, handling_ms

MB = 1_000_000  # as models/transfer.py counts them


def test_handling_is_what_the_executor_held_beyond_execution_compile_and_transfer() -> None:
    assert handling_ms(60.0, 10.0, None, None) == 50.0
    assert handling_ms(60.0, 10.0, 5.0, 15.0) == 30.0
    # Clocks that disagree are not a measurement.
    assert handling_ms(8.0, 10.0, None, None) is None
    assert handling_ms(float("nan"), 10.0, None, None) is None


def test_a_class_learns_its_handling_as_a_line_in_the_bytes_moved() -> None:
    handling = Handling()
    assert handling.ms("torch-cpu-x", 10 * MB) == 0.0  # nothing measured anywhere
    for mb in (1, 4, 16, 64, 2, 32) * 5:
        handling.observe("torch-cpu-x", mb * MB, 2.0 + 1.5 * mb)
    assert handling.ms("torch-cpu-x", 10 * MB) == pytest.approx(17.0, rel=0.02)
    assert handling.ms("torch-cpu-x", 0) == pytest.approx(2.0, abs=0.3)
    fit = handling.by_class()["torch-cpu-x"]
    assert fit["ms_per_mb"] == pytest.approx(1.5, rel=0.02) and fit["rows"] == 30


def test_a_class_not_measured_yet_takes_the_least_of_the_measured_ones() -> None:
    """Making inputs and checksums is mostly the same work on every runtime: a class never
    measured is not taken for free beside classes whose handling is known."""
    handling = Handling()
    for mb in (1, 8, 32) * 4:
        handling.observe("torch-cpu-x", mb * MB, 3.0 * mb)
        handling.observe("jax-cpu-x", mb * MB, 4.0 * mb)
    assert handling.ms("numpy-cpu-x", 10 * MB) == pytest.approx(
        handling.ms("torch-cpu-x", 10 * MB))
    assert handling.ms("numpy-cpu-x", 10 * MB) == pytest.approx(30.0, rel=0.05)


def test_the_line_follows_a_class_whose_handling_changes() -> None:
    handling = Handling()
    for _ in range(100):
        handling.observe("c", 10 * MB, 10.0)
    for _ in range(200):
        handling.observe("c", 10 * MB, 40.0)
    assert handling.ms("c", 10 * MB) == pytest.approx(40.0, rel=0.1)
