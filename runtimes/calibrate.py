"""What a host runtime's matmul achieves per precision, measured once when its executor starts.

The cost model's cold prior is a roofline (models/priors.py): for a CPU class, a generic CPU
whose bf16 runs at half the fp32 rate, the same for every runtime. That guess is wrong both
ways on real machines: on a Xeon with AMX, torch's bf16 matmul ran ~2x *faster* than its fp32
(BENCHMARKS.md, *Model layers*: torch bf16 measured fastest where the router kept fp32 was 37
of the 49 late misses), and JAX's bf16 on the same machine ran slower than its fp32. So each
executor measures, before it serves: one eager matmul per precision it offers, the best of
its runs over a tenth of a second after a warm-up (interference from a neighbour on a shared
core only ever slows a run; `MEASURE_S`), in the threads and cores it was given. Its
heartbeats carry the rates (``calibration``, GFLOP/s by precision), and the worker builds the
class's prior from them (models/priors.py::prior_for_class).

About a tenth of a second per precision; a precision whose warm-up and first timed run take
longer than the budget is measured from that one timed run.

The roofline misses the other kinds far more than a rate can fix (a layernorm's or softmax's
passes over memory, attention's intermediates, a runtime's per-kind kernels): so the executor
also times one reference op of each other kind (models/priors.py::REFERENCE_OPS, 1-10 ms in
fp32 on one core) in each eager precision it offers, and the memory-bound kinds again out of
the cache in fp32 (``OUT_OF_CACHE_OPS``), within a budget (``calibrate_kernels``;
heartbeats' ``kernel_ms``), and the class's prior bends each kind's roofline by how far its
reference op missed it. Simulated runtimes and accelerators are not calibrated (their
catalog entries are their priors; a 256^3 matmul on a GPU measures its launch, not its rate).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable

import numpy as np

from models.ops import Variant, make_inputs
from models.opspecs import MatmulSpec, OpSpec
from models.priors import (
    ACTIVATED,
    ACTIVATION_OPS,
    DISPATCH_OP,
    LARGE,
    OUT_OF_CACHE_OPS,
    REFERENCE_POINTS,
)
from models.setup import setup_excess
from runtimes.base import Execution, Runtime, VariantRefused

logger = logging.getLogger(__name__)

# 2 * 256^3 = 34 MFLOP: ~0.3-1 ms at the rates one CPU core reaches in fp32, large enough
# that the runtime's per-call dispatch is a few percent of it.
SIZE = 256
RUNS = 5
BUDGET_S = 0.5
# Each measurement keeps timing runs until this long was spent (and at least its ``runs``),
# at most `MAX_RUNS`: the best of a handful of sub-millisecond runs is not the steady rate. On
# one AMD EPYC core torch's fp32 256^3 rate read 35-65 GFLOP/s over eight calibrations of
# five runs each (the executor's first, the one it serves with, 35) and 65-81 with runs for
# 0.1 s, the rate its 1024^3 matmul reaches (75): its prior put torch's GEMM-like kinds at
# 1.6-1.9x their time (BENCHMARKS.md, *Cold priors*), and a one-queue fleet kept its
# convolutions and batched matmuls on NumPy. A slow period or a neighbour's turn on a shared
# core only ever slows a run, and many short runs find the clean ones.
MEASURE_S = 0.1
KERNEL_MEASURE_S = 0.05
MAX_RUNS = 200
# The reference kernels: at most this long in all (the executor's startup), and this long per
# (kind, precision) before its best run so far stands (a slow emulated precision is measured
# from its first timed run after the warm-up; the warm-up never counts). 6 s: on 2026-12-07
# eager JAX's memory-bound points ran 3-4x their times of the day before on this machine
# (2048^2 layernorm 56-78 ms against 16, the 4096^2 ones ~300 ms) and 4 s ended its fp32
# kernels before bmm, conv2d, linear and mlp, the kinds of most model layers.
KERNEL_BUDGET_S = 6.0
KERNEL_OPTION_BUDGET_S = 0.25
KERNEL_RUNS = 3
# The first call of the reference linear layer in each mode besides eager (a compilation:
# 100-200 ms for JAX's on this machine): at most this long in all.
SETUP_OP = "linear"
SETUP_BUDGET_S = 1.0
DISPATCH_RUNS = 20  # the per-call op takes microseconds: the best of many
# Within a precision, the kinds the roofline misses most go first, so a budget spent early
# (eager JAX sets up each op on its first call) leaves the GEMM-like kinds, which a measured
# rate already places within ~2x, to the fp32 factor: on one AMD EPYC eager JAX's bf16
# layernorm ran 12x the prior that took its fp32 factor (BENCHMARKS.md, *Cold priors*).
MISSED_MOST = frozenset({"layernorm", "softmax", "attention"})


def calibrates(runtime: Runtime) -> bool:
    """Whether ``runtime`` is calibrated: real runtimes on the host's CPU."""
    return runtime.device == "cpu" and not runtime.simulated


def calibrate(runtime: Runtime, size: int = SIZE, runs: int = RUNS,
              budget_s: float = BUDGET_S) -> dict[str, float] | None:
    """GFLOP/s of a ``size``-cubed eager matmul in each precision ``runtime`` offers for it (the
    best of at least ``runs`` timed runs after a warm-up, more until `MEASURE_S` is spent,
    fewer when they exceed ``budget_s``: `best_of`); None
    for a runtime that is not calibrated or offers no eager matmul."""
    if not calibrates(runtime):
        return None
    precisions = [p for kind, p, mode in runtime.capabilities()
                  if kind == "matmul" and mode == "eager"]
    rates: dict[str, float] = {}
    for precision in precisions:
        spec = MatmulSpec(m=size, k=size, n=size)
        variant = Variant(precision, "eager")
        try:  # after a warm-up: JAX compiles its eager matmul on the first call (~0.2 s)
            best_ms = _best_ms(runtime, spec, variant, runs, budget_s, measure_s=MEASURE_S)
        except VariantRefused:
            continue
        except Exception as exc:  # a calibration that fails leaves the generic prior in place
            logger.warning("calibrating %s %s failed: %s", runtime.device_class, precision, exc)
            continue
        if best_ms > 0.0:
            rates[precision] = round(spec.flops() / (best_ms / 1e3) / 1e9, 3)
    return rates or None


def _points(offered: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (reference point, precision) pairs to time for the eager (kind, precision) pairs a
    runtime offers: each kind's reference op in every precision, its out-of-cache one in fp32,
    the reference linear with each timed activation in fp32."""
    points = [(kind, precision) for kind, precision in offered if kind in REFERENCE_POINTS]
    points += [(kind + LARGE, "fp32") for kind, precision in offered
               if precision == "fp32" and kind in OUT_OF_CACHE_OPS]
    if ("linear", "fp32") in offered:
        points += [(ACTIVATED + name, "fp32") for name in ACTIVATION_OPS]
    return points


def _order(option: tuple[str, str]) -> tuple[bool, str, int, str]:
    """fp32 first; within a precision the kinds the roofline misses most (`MISSED_MOST`),
    then their out-of-cache points, then the rest."""
    point, precision = option
    rank = 1 if point.endswith(LARGE) else 0 if point in MISSED_MOST else 2
    return (precision != "fp32", precision, rank, point)


def _best_ms(runtime: Runtime, op: OpSpec, variant: Variant, runs: int, budget_s: float,
             setups: list[float] | None = None,
             measure_s: float = KERNEL_MEASURE_S) -> float:
    """The best of at least ``runs`` timed runs after a warm-up, more until ``measure_s``
    is spent, fewer past ``budget_s`` but at least one (`best_of`): a first eager call may set
    up the op (eager JAX sets up each op on its first call), so the warm-up is never the
    measurement. ``setups`` receives the first call's
    setup beyond one execution (``setup_excess``) where it was one."""
    inputs = make_inputs(op, seed=0)
    began = time.perf_counter()
    first, excess = first_call(runtime, op, variant, inputs)
    if setups is not None and excess is not None:
        setups.append(excess)
    left_s = budget_s - (time.perf_counter() - began)  # the warm-up counts against the budget
    return best_of(_timer(runtime, op, variant, inputs), runs, left_s, measure_s)


def first_call(runtime: Runtime, op: OpSpec, variant: Variant,
               inputs: dict[str, np.ndarray]) -> tuple[Execution, float | None]:
    """The first call of a (shape, variant) and its setup beyond one execution (None where
    it was warm already): in wall time, or, on a CPU runtime, in the process's CPU time where
    that is less. Executors calibrate as they start, and executors sharing a core start
    together: there a first call's wall time stretched with its neighbours' calibrations
    (NumPy's eager setup read 5-16 ms with torch and JAX calibrating on its core, 1.8 alone;
    torch's 0.2-3.9), and the router charged every new shape on NumPy 9 ms, more than NumPy
    saved on any model layer, so it never tried one. The CPU time counts the setup's own work
    only; the wall time stays the bound where the setup's work ran on several cores."""
    cpu_began = time.process_time()
    first = runtime.execute(op, variant, inputs)
    cpu_ms = (time.process_time() - cpu_began) * 1e3
    if first.setup_ms is None:
        return first, None
    wall = setup_excess(first.setup_ms, first.exec_ms)
    if first.cpu_ms is None:
        return first, wall
    # What the call spent besides its timed run (build, warm-up), less one execution.
    return first, min(wall, setup_excess(cpu_ms - first.cpu_ms, first.cpu_ms))


def _timer(runtime: Runtime, op: OpSpec, variant: Variant,
           inputs: dict[str, np.ndarray]) -> Callable[[], float]:
    """One timed run of ``op`` on ``inputs``: its execution's ms."""
    return lambda: runtime.execute(op, variant, inputs).exec_ms


def best_of(run: Callable[[], float], runs: int, budget_s: float, measure_s: float,
            max_runs: int = MAX_RUNS) -> float:
    """The least of ``run()``'s times (ms): at least one run; then runs until ``runs`` were
    made and ``measure_s`` was spent (at most ``max_runs``), none started past ``budget_s``."""
    began = time.perf_counter()
    best = float("inf")
    done = 0
    while True:
        best = min(best, float(run()))
        done += 1
        elapsed = time.perf_counter() - began
        if done >= max_runs or elapsed > budget_s or (done >= runs and elapsed >= measure_s):
            return best


def calibrate_kernels(runtime: Runtime, budget_s: float = KERNEL_BUDGET_S,
                      option_budget_s: float = KERNEL_OPTION_BUDGET_S,
                      runs: int = KERNEL_RUNS,
                      setups: list[float] | None = None) -> dict[str, dict[str, float]] | None:
    """ms of each reference op (models/priors.py::REFERENCE_OPS) per eager precision
    ``runtime`` offers for its kind, keyed by the op's signature: after the per-call cost
    (models/priors.py::DISPATCH_OP, fp32, best of `DISPATCH_RUNS`), fp32 of every kind
    (`MISSED_MOST` first, then the out-of-cache ops, then the rest), then the other precisions
    (`MISSED_MOST` first within each), until ``budget_s`` is spent (at
    least one is measured; what is left keeps its roofline). None for a runtime that is not
    calibrated. ``setups`` receives each reference op's first-call setup beyond one execution
    (``calibrate_setup`` reads them)."""
    if not calibrates(runtime):
        return None
    offered = {(kind, precision) for kind, precision, mode in runtime.capabilities()
               if mode == "eager"}
    options = sorted(_points(offered), key=_order)
    measured: dict[str, dict[str, float]] = {}
    began = time.perf_counter()
    if ("matmul", "fp32") in offered:  # the per-call cost first: microseconds
        try:
            ms = _best_ms(runtime, DISPATCH_OP, Variant("fp32", "eager"), DISPATCH_RUNS,
                          option_budget_s)
            if round(ms, 5) > 0.0:  # a zero would make the heartbeat malformed
                measured[DISPATCH_OP.signature()] = {"fp32": round(ms, 5)}
        except Exception as exc:  # the runtime's guessed overhead stays
            logger.warning("calibrating %s dispatch failed: %s", runtime.device_class, exc)
    for done, (kind, precision) in enumerate(options):
        if done and time.perf_counter() - began > budget_s:
            logger.info("calibrating %s: budget of %.1f s spent, %d of %d kernels measured",
                        runtime.device_class, budget_s, done, len(options))
            break
        op = REFERENCE_POINTS[kind]
        try:
            ms = _best_ms(runtime, op, Variant(precision, "eager"), runs, option_budget_s,
                          setups)
        except VariantRefused:
            continue
        except Exception as exc:  # that kind keeps its roofline
            logger.warning("calibrating %s %s %s failed: %s", runtime.device_class, kind,
                           precision, exc)
            continue
        if round(ms, 4) > 0.0:
            measured.setdefault(op.signature(), {})[precision] = round(ms, 4)
    return measured or None


def calibrate_setup(runtime: Runtime, eager_setups: list[float],
                    budget_s: float = SETUP_BUDGET_S) -> dict[str, float] | None:
    """Per mode, the setup beyond one execution that a shape new to the executor costs, as the
    router's prior before any workload measured it (heartbeats' ``setup_excess_ms``;
    models/setup.py): eager, the median of the reference ops' first calls
    (``calibrate_kernels``'s ``setups``); each other mode the runtime offers for an fp32
    linear layer, the first call of the reference linear (``SETUP_OP``) in it (a
    compilation), while ``budget_s`` lasts. Eager JAX sets up every op on its first call of
    a shape (264-666 ms for the live mix's linear, mlp and conv2d layers on one core, against
    executions of 46-152 ms), where torch and NumPy pay a few ms: a router that charged an unmeasured mode nothing sent its
    first shapes there and queued everything behind the setups. None for a runtime that is
    not calibrated or measured nothing."""
    if not calibrates(runtime):
        return None
    out: dict[str, float] = {}
    if eager_setups:
        out["eager"] = round(float(statistics.median(eager_setups)), 3)
    modes = sorted({mode for kind, precision, mode in runtime.capabilities()
                    if kind == SETUP_OP and precision == "fp32" and mode != "eager"})
    op = REFERENCE_POINTS[SETUP_OP]
    began = time.perf_counter()
    for mode in modes:
        if time.perf_counter() - began > budget_s:
            break
        try:
            _, excess = first_call(runtime, op, Variant("fp32", mode), make_inputs(op, seed=0))
        except VariantRefused:
            continue
        except Exception as exc:  # that mode's setup stays unknown until a workload pays it
            logger.warning("calibrating %s %s setup failed: %s", runtime.device_class, mode, exc)
            continue
        if excess is not None:
            out[mode] = round(excess, 3)
    return out or None
