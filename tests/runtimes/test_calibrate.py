"""runtimes/calibrate.py: an executor's matmul rate per precision, measured before it serves."""

from __future__ import annotations

import pytest

from runtimes import get_runtime
from runtimes.calibrate import calibrate, calibrate_kernels, calibrates


def eager_matmul_precisions(runtime) -> set[str]:
    return {p for kind, p, mode in runtime.capabilities() if kind == "matmul" and mode == "eager"}


@pytest.mark.parametrize("name", ["numpy", "torch", "jax"])
def test_every_offered_precision_gets_a_positive_rate(name: str) -> None:
    runtime = get_runtime(name, "cpu")
    rates = calibrate(runtime, size=64, runs=2)
    assert rates is not None
    assert set(rates) == eager_matmul_precisions(runtime)
    assert all(rate > 0 for rate in rates.values())


def test_the_rate_is_the_work_over_the_best_run() -> None:
    """GFLOP/s = 2 n^3 over the fastest timed run: a runtime slowed 10x reads ~10x slower."""
    fast = get_runtime("numpy", "cpu")
    slow = get_runtime("numpy", "cpu")
    original = slow._timed

    def stretched(*args):
        out, ms, *rest = original(*args)
        return (out, ms * 10.0, *rest)

    slow._timed = stretched
    quick = calibrate(fast, size=128, runs=3)["fp32"]
    assert calibrate(slow, size=128, runs=3)["fp32"] < quick / 3


def test_simulated_runtimes_are_not_calibrated() -> None:
    runtime = get_runtime("sim", "h100")
    assert not calibrates(runtime)
    assert calibrate(runtime) is None


def test_every_reference_kernel_of_numpy_is_timed_in_fp32() -> None:
    """NumPy offers every kind in fp32 eager: each reference op has a positive time, keyed by
    its signature (what the worker matches against models/priors.py::REFERENCE_OPS)."""
    from models.priors import DISPATCH, REFERENCE_OPS, reference_kind

    measured = calibrate_kernels(get_runtime("numpy", "cpu"), runs=1)
    assert measured is not None
    assert {reference_kind(signature) for signature in measured} == {*REFERENCE_OPS, DISPATCH}
    assert all(by["fp32"] > 0 for by in measured.values())


def test_the_kernel_budget_bounds_the_calibration() -> None:
    """Past the budget the rest keeps its roofline: a budget of zero measures the per-call
    cost and one option."""
    measured = calibrate_kernels(get_runtime("numpy", "cpu"), budget_s=0.0, runs=1)
    assert measured is not None and sum(len(by) for by in measured.values()) == 2
    assert calibrate_kernels(get_runtime("sim", "h100")) is None


def test_past_fp32_the_kinds_the_roofline_misses_most_come_first() -> None:
    """torch offers bf16 for every kind: with a budget for only a few past fp32, the bf16
    kernels measured are the memory-bound kinds'."""
    from runtimes.calibrate import MISSED_MOST

    runtime = get_runtime("torch", "cpu")
    order: list[tuple[str, str]] = []
    original = runtime.execute

    def recording(op, variant, inputs):
        if not order or order[-1] != (op.kind, variant.precision):
            order.append((op.kind, variant.precision))
        return original(op, variant, inputs)

    runtime.execute = recording
    calibrate_kernels(runtime, runs=1, option_budget_s=0.0)
    assert order[0] == ("matmul", "fp32")  # the per-call cost, before the kinds
    order = order[1:]
    fp32 = [kind for kind, precision in order if precision == "fp32"]
    assert len(fp32) == 7 and order[:7] == [(kind, "fp32") for kind in fp32]
    after = [kind for kind, precision in order[7:] if precision == order[7][1]]
    assert set(after[:len(MISSED_MOST)]) == MISSED_MOST
