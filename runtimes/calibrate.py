"""What a host runtime's matmul achieves per precision, measured once when its executor starts.

The cost model's cold prior is a roofline (models/priors.py): for a CPU class, a generic CPU
whose bf16 runs at half the fp32 rate, the same for every runtime. That guess is wrong both
ways on real machines: on a Xeon with AMX, torch's bf16 matmul ran ~2x *faster* than its fp32
(BENCHMARKS.md, *Model layers*: torch bf16 measured fastest where the router kept fp32 was 37
of the 49 late misses), and JAX's bf16 on the same machine ran slower than its fp32. So each
executor measures, before it serves: one eager matmul per precision it offers, best of a few
runs (interference from a neighbour on a shared core only ever slows a run), in the threads
and cores it was given. Its heartbeats carry the rates (``calibration``, GFLOP/s by precision),
and the worker builds the class's prior from them (models/priors.py::prior_for_class).

A few milliseconds per precision; a precision whose first run takes longer than the budget is
measured from that run alone. Simulated runtimes and accelerators are not calibrated (their
catalog entries are their priors; a 256^3 matmul on a GPU measures its launch, not its rate).
"""

from __future__ import annotations

import logging
import time

from models.ops import Variant, make_inputs
from models.opspecs import MatmulSpec
from runtimes.base import Runtime, VariantRefused

logger = logging.getLogger(__name__)

# 2 * 256^3 = 34 MFLOP: ~0.3-1 ms at the rates one CPU core reaches in fp32, large enough
# that the runtime's per-call dispatch is a few percent of it.
SIZE = 256
RUNS = 5
BUDGET_S = 0.5


def calibrates(runtime: Runtime) -> bool:
    """Whether ``runtime`` is calibrated: real runtimes on the host's CPU."""
    return runtime.device == "cpu" and not runtime.simulated


def calibrate(runtime: Runtime, size: int = SIZE, runs: int = RUNS,
              budget_s: float = BUDGET_S) -> dict[str, float] | None:
    """GFLOP/s of a ``size``-cubed eager matmul in each precision ``runtime`` offers for it (the
    best of ``runs`` timed runs after its warm-up, fewer when they exceed ``budget_s``); None
    for a runtime that is not calibrated or offers no eager matmul."""
    if not calibrates(runtime):
        return None
    precisions = [p for kind, p, mode in runtime.capabilities()
                  if kind == "matmul" and mode == "eager"]
    rates: dict[str, float] = {}
    for precision in precisions:
        spec = MatmulSpec(m=size, k=size, n=size)
        variant = Variant(precision, "eager")
        inputs = make_inputs(spec, seed=0)
        best_ms = float("inf")
        began = time.perf_counter()
        try:
            for _ in range(max(runs, 1)):
                best_ms = min(best_ms, runtime.execute(spec, variant, inputs).exec_ms)
                if time.perf_counter() - began > budget_s:
                    break
        except VariantRefused:
            continue
        except Exception as exc:  # a calibration that fails leaves the generic prior in place
            logger.warning("calibrating %s %s failed: %s", runtime.device_class, precision, exc)
            continue
        if best_ms > 0.0:
            rates[precision] = round(spec.flops() / (best_ms / 1e3) / 1e9, 3)
    return rates or None
