"""Perform one routed workload on a runtime: the executor's pure core, without Kafka.

:func:`perform` takes a decoded route record and returns the outcome (the
``switchyard.results`` shape) and the metric (the ``switchyard.metrics`` shape) as plain dicts.
Every failure of the workload (bad spec, refused variant, bad inline tensor, out of memory,
a backend error) becomes ``status: "error"`` with a reason; it never raises for those.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.ops import SpecError, Variant, make_inputs
from models.tensors import checksum, encode_tensor
from models.workload import Workload, WorkloadLimits, parse_workload
from runtimes.base import Execution, Runtime, VariantRefused

logger = logging.getLogger(__name__)
MAX_SLOWDOWN = 1000.0


def now_ms() -> int:
    """Wall-clock milliseconds (comparable across processes, unlike perf_counter)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class WorkResult:
    """What one workload produced: the outcome and metric records, as dicts."""

    outcome: dict[str, Any]
    metric: dict[str, Any]


def route_id(route: object) -> str:
    """The workload id of a decoded route; SpecError when there is none to answer to.

    A route without a usable id cannot get an outcome, so the executor dead-letters it.
    """
    if not isinstance(route, dict):
        raise SpecError(f"route must be a JSON object, got {type(route).__name__}")
    workload_id = route.get("id")
    if not isinstance(workload_id, str) or not workload_id or len(workload_id) > 1024:
        raise SpecError("route has no workload id")
    return workload_id


def read_slowdown(path: str | Path | None) -> float:
    """The slowdown factor in ``path`` (>= 1); 1 when unset, missing or not a number."""
    if path is None:
        return 1.0
    try:
        factor = float(Path(path).read_text().strip() or 1.0)
    except (OSError, ValueError):
        return 1.0
    if not math.isfinite(factor):
        return 1.0
    return min(max(factor, 1.0), MAX_SLOWDOWN)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _run(
    runtime: Runtime, workload: Workload, variant: Variant, slowdown: float
) -> tuple[Execution, float, bool]:
    """Execute, then stretch the measured time by ``slowdown`` (really sleeping it)."""
    if variant.precision not in workload.precisions:
        allowed = ", ".join(workload.precisions)
        raise VariantRefused(f"variant {variant} is not among the request's precisions ({allowed})")
    if workload.inputs is not None:
        inputs: dict[str, np.ndarray] = dict(workload.inputs)
    elif runtime.simulated:
        inputs = {}  # the simulator computes nothing; do not allocate gigabytes for it
    else:
        inputs = make_inputs(workload.op, workload.seed)
    execution = runtime.execute(workload.op, variant, inputs)
    exec_ms = execution.exec_ms
    if slowdown > 1.0:
        # A deliberately slowed device: the extra time is really spent, measured, and reported
        # as part of execution, so learners see exactly what a client would.
        start = time.perf_counter_ns()
        time.sleep((slowdown - 1.0) * exec_ms / 1e3)
        exec_ms += (time.perf_counter_ns() - start) / 1e6
    return execution, exec_ms, slowdown > 1.0


def perform(
    route: dict[str, Any],
    runtime: Runtime,
    *,
    device_id: str,
    limits: WorkloadLimits,
    slowdown: float = 1.0,
    clock_ms: Callable[[], int] = now_ms,
) -> WorkResult:
    """Run the route's workload in the route's variant; never raises for a workload's fault."""
    workload_id = route_id(route)
    started_at_ms = clock_ms()
    decided = _number(route.get("decided_at_ms"))
    # Clocks of the decider's and executor's hosts may disagree by a little: never negative.
    queue_ms = max(0.0, started_at_ms - decided) if decided is not None else 0.0
    raw_variant: dict[str, Any] = _dict(route.get("variant"))
    attempt = route.get("attempt") if type(route.get("attempt")) is int else 1
    raw_workload = _dict(route.get("workload"))
    op_dict = _dict(raw_workload.get("op"))
    flops = bytes_moved = 0.0
    status, error = "ok", None
    execution: Execution | None = None
    exec_ms, throttled = 0.0, False
    output_wire: dict[str, Any] | None = None
    digest: str | None = None
    submitted = _number(raw_workload.get("submitted_at_ms"))
    try:
        variant = Variant.from_dict(route.get("variant"))
        raw_variant = variant.to_dict()
        workload = parse_workload(route.get("workload"), limits)
        op_dict = workload.op.to_dict()
        flops, bytes_moved = workload.op.flops(), workload.op.bytes_moved(variant.precision)
        execution, exec_ms, throttled = _run(runtime, workload, variant, slowdown)
        if execution.output is not None:
            digest = checksum(execution.output)
            if workload.return_output and execution.output.size <= limits.max_inline_elements:
                output_wire = encode_tensor(execution.output.astype(workload.op.dtype))
    except (SpecError, VariantRefused) as exc:
        status, error = "error", str(exc)
    except MemoryError as exc:
        status, error = "error", f"out of memory: {exc}"[:500]
    except Exception as exc:  # a backend failure on one workload must not stop the executor
        logger.exception("workload %s failed on %s", workload_id, runtime.device_class)
        status, error = "error", f"{type(exc).__name__}: {exc}"[:500]
    finished_at_ms = clock_ms()
    compile_ms = execution.compile_ms if execution else None
    energy_j = execution.energy_j if execution else None
    common = {
        "device_id": device_id,
        "device_class": runtime.device_class,
        "variant": raw_variant,
        "queue_ms": queue_ms,
        "compile_ms": compile_ms,
        "energy_j": energy_j,
        "error": error,
        "attempt": attempt,
        "simulated": runtime.simulated,
    }
    outcome = {
        "id": workload_id,
        "status": status,
        "latency_ms": exec_ms,
        "checksum": digest,
        "output": output_wire,
        "decided_at_ms": int(decided) if decided is not None else None,
        "finished_at_ms": finished_at_ms,
        "submitted_at_ms": int(submitted) if submitted is not None else None,
        **common,
    }
    metric = {
        "workload_id": workload_id,
        "runtime": runtime.name,
        "op": op_dict,
        "flops": flops,
        "bytes_moved": bytes_moved,
        "status": status,
        "exec_ms": exec_ms,
        "started_at_ms": started_at_ms,
        "finished_at_ms": finished_at_ms,
        "predicted_ms": _number(route.get("predicted_ms")),
        "setup_ms": execution.setup_ms if execution else None,
        "throttled": throttled,
        **common,
    }
    return WorkResult(outcome=outcome, metric=metric)
