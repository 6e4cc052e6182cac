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
    """NumPy offers every kind in fp32 eager: each reference op, the memory-bound kinds' out
    of the cache too, has a positive time, keyed by its signature (what the worker matches
    against models/priors.py::REFERENCE_POINTS)."""
    from models.priors import DISPATCH, REFERENCE_POINTS, reference_kind

    measured = calibrate_kernels(get_runtime("numpy", "cpu"), runs=1)
    assert measured is not None
    assert {reference_kind(signature) for signature in measured} == {*REFERENCE_POINTS,
                                                                     DISPATCH}
    assert {"layernorm.large", "softmax.large"} <= set(REFERENCE_POINTS)
    assert all(by["fp32"] > 0 for by in measured.values())


def test_the_kernel_budget_bounds_the_calibration() -> None:
    """Past the budget the rest keeps its roofline: a budget of zero measures the per-call
    cost and one option."""
    measured = calibrate_kernels(get_runtime("numpy", "cpu"), budget_s=0.0, runs=1)
    assert measured is not None and sum(len(by) for by in measured.values()) == 2
    assert calibrate_kernels(get_runtime("sim", "h100")) is None


def test_past_fp32_the_kinds_the_roofline_misses_most_come_first() -> None:
    """torch offers bf16 for every kind. In fp32 the kinds the roofline misses most go first,
    then the memory-bound kinds out of the cache (fp32 only), then the rest, the reference
    linear with gelu (fp32 only) right after the plain one; past fp32, with a budget for only
    a few, the bf16 kernels measured are the memory-bound kinds'."""
    from models.priors import DISPATCH, OUT_OF_CACHE_OPS, reference_kind
    from runtimes.calibrate import MISSED_MOST

    runtime = get_runtime("torch", "cpu")
    order: list[tuple[str | None, str]] = []
    original = runtime.execute

    def recording(op, variant, inputs):
        point = (reference_kind(op.signature()), variant.precision)
        if not order or order[-1] != point:
            order.append(point)
        return original(op, variant, inputs)

    runtime.execute = recording
    calibrate_kernels(runtime, runs=1, option_budget_s=0.0)
    assert order[0] == (DISPATCH, "fp32")  # the per-call cost, before the kinds
    order = order[1:]
    fp32 = [point for point, precision in order if precision == "fp32"]
    assert len(fp32) == 10 and order[:10] == [(point, "fp32") for point in fp32]
    assert set(fp32[:3]) == MISSED_MOST
    assert fp32[3:5] == [kind + ".large" for kind in sorted(OUT_OF_CACHE_OPS)]
    assert fp32.index("linear.gelu") == fp32.index("linear") + 1
    after = [point for point, precision in order[10:] if precision == order[10][1]]
    assert set(after[:len(MISSED_MOST)]) == MISSED_MOST
    assert not any(str(point).endswith((".large", ".gelu")) for point, _ in order[10:])


def test_the_setup_of_a_new_shape_is_measured_per_mode_from_the_first_calls() -> None:
    """The reference ops' first calls give eager's setup beyond one execution (their median),
    and a mode besides eager is measured on the reference linear's first call in it; what
    the router charges a cold shape before a workload measured it."""
    import statistics

    from runtimes.calibrate import calibrate_setup

    runtime = get_runtime("numpy", "cpu")
    setups: list[float] = []
    calibrate_kernels(runtime, runs=1, setups=setups)
    assert setups and all(ms >= 0.0 for ms in setups)  # one per reference op, all first calls
    got = calibrate_setup(runtime, setups)
    assert got is not None and got["eager"] == round(statistics.median(setups), 3)
    assert set(got) == {"eager"}  # NumPy offers no compiled mode
    assert calibrate_setup(get_runtime("sim", "h100"), [1.0]) is None


def test_a_compiling_mode_is_charged_its_first_call() -> None:
    """JAX compiles: its compiled mode's setup is the reference linear's first call beyond
    one execution (a compilation, far above the execution of a 256x512x512 layer)."""
    from runtimes.calibrate import calibrate_setup

    runtime = get_runtime("jax", "cpu", threads=1)
    got = calibrate_setup(runtime, [])
    assert got is not None and set(got) == {"compiled"} and got["compiled"] > 0.0


def test_a_measurement_runs_until_its_time_is_spent_and_keeps_the_best() -> None:
    """`best_of`: at least ``runs`` runs and, past them, more until ``measure_s`` is spent (at
    most ``max_runs``), none started past the budget but always one. A runtime whose first
    runs are slow (torch's 256^3 matmul on one AMD EPYC core read 35 GFLOP/s from five runs,
    65-81 from a tenth of a second of them) is measured at its steady time."""
    from runtimes.calibrate import best_of

    def runs_of(times: list[float]):
        made: list[float] = []

        def run() -> float:
            made.append(times[min(len(made), len(times) - 1)])
            return made[-1]
        return run, made

    warming = [35.0, 30.0, 20.0, 12.0, 10.0, 10.0]
    run, made = runs_of(warming)
    assert best_of(run, runs=2, budget_s=60.0, measure_s=0.0) == 30.0 and len(made) == 2
    run, made = runs_of(warming)
    assert best_of(run, runs=2, budget_s=60.0, measure_s=60.0, max_runs=8) == 10.0
    assert len(made) == 8
    run, made = runs_of(warming)
    assert best_of(run, runs=5, budget_s=-1.0, measure_s=60.0) == 35.0 and len(made) == 1


def test_a_first_calls_wait_for_its_core_is_not_charged_as_setup() -> None:
    """Executors sharing a core calibrate at the same time: a first call that waits (here a
    sleep in its build: wall time, no CPU) is not setup the router should charge every new
    shape; a build that works (CPU) is, within the clock's noise."""
    import time as clock

    from models.ops import Variant, make_inputs
    from models.opspecs import MatmulSpec
    from runtimes.calibrate import first_call

    op, fp32 = MatmulSpec(m=32, k=32, n=32), Variant("fp32", "eager")

    def built_after(runtime, work):
        original = runtime._build

        def build(spec, variant, args):
            work()
            return original(spec, variant, args)
        runtime._build = build
        return runtime

    def busy() -> None:
        until = clock.process_time() + 0.04
        while clock.process_time() < until:
            pass

    waiting = built_after(get_runtime("numpy", "cpu"), lambda: clock.sleep(0.04))
    first, waited = first_call(waiting, op, fp32, make_inputs(op, seed=0))
    assert first.setup_ms is not None and first.setup_ms >= 40.0  # the wall time saw it
    assert waited is not None and waited < 10.0
    working = built_after(get_runtime("numpy", "cpu"), busy)
    _, worked = first_call(working, op, fp32, make_inputs(op, seed=0))
    assert worked is not None and worked >= 30.0
    _, again = first_call(working, op, fp32, make_inputs(op, seed=0))
    assert again is None  # warm: no setup
