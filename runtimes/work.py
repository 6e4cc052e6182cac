"""Perform one routed workload on a runtime: the executor's pure core, without Kafka.

:func:`perform` takes a decoded route record and returns the outcome (the
``switchyard.results`` shape) and the metric (the ``switchyard.metrics`` shape) as plain dicts.
Every failure of the workload (bad spec, refused variant, bad inline tensor, out of memory,
a backend error) becomes ``status: "error"`` with a reason; it never raises for those.

Dynamic batching: :func:`parsed_batch_key` says which routes may share one batched call (same op
spec, shapes and dtype included, same variant, on a runtime that batches them), :func:`plan`
groups a fetched list of routes by it, and :func:`perform_batch` runs a group as one
``Runtime.execute_batch`` call with one outcome and metric per workload, or, if the batched
call fails, one by one with :func:`perform` (one workload's fault never fails the others).

Behind a declared link (``link``, models/transfer.py) :func:`perform` really waits the link's
time for the workload's bytes — half the round trip and the inputs before the execution, half
and the output after — and reports the measured wait as ``transfer_ms`` (``link_simulated``:
the wait stands for a network it does not use). Energy no counter measured is modelled from
the runtime's ``power_model`` (the simulator's device, or ``--power-model``) and flagged
``energy_simulated``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.devices import modelled_energy_j
from models.ops import SpecError, Variant, make_inputs
from models.tensors import checksum, encode_tensor
from models.transfer import Link, transfer_bytes
from models.workload import Workload, WorkloadLimits, parse_workload
from runtimes.base import Execution, Runtime, VariantRefused
from runtimes.sim_rt import sleep_precisely

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


def link_wait(link: Link, rtt_share_ms: float, nbytes: float,
              wait: Callable[[float], None] = sleep_precisely) -> float:
    """Wait ``rtt_share_ms`` plus ``nbytes`` at the link's bandwidth; the measured ms."""
    start = time.perf_counter_ns()
    wait((rtt_share_ms + nbytes / link.bytes_per_ms) / 1e3)
    return (time.perf_counter_ns() - start) / 1e6


def perform(
    route: dict[str, Any],
    runtime: Runtime,
    *,
    device_id: str,
    limits: WorkloadLimits,
    slowdown: float = 1.0,
    clock_ms: Callable[[], int] = now_ms,
    link: Link | None = None,
    wait: Callable[[float], None] = sleep_precisely,
    parsed: Parsed | None = None,
) -> WorkResult:
    """Run the route's workload in the route's variant (behind ``link``: with the transfer of
    its bytes); never raises for a workload's fault. ``parsed``: the route's workload and
    variant as :func:`parse_route` already parsed them (with the same ``limits``), not
    parsed again."""
    workload_id = route_id(route)
    started_at_ms = clock_ms()
    held_from = time.perf_counter_ns()
    decided = _number(route.get("decided_at_ms"))
    # Clocks of the decider's and executor's hosts may disagree by a little: never negative.
    queue_ms = max(0.0, started_at_ms - decided) if decided is not None else 0.0
    raw_variant: dict[str, Any] = _dict(route.get("variant"))
    raw_workload = _dict(route.get("workload"))
    op_dict = _dict(raw_workload.get("op"))
    flops = bytes_moved = 0.0
    status, error = "ok", None
    execution: Execution | None = None
    exec_ms, throttled = 0.0, False
    output_wire: dict[str, Any] | None = None
    digest: str | None = None
    moved: tuple[float, int] | None = None  # (measured transfer ms, bytes) behind a link
    try:
        if parsed is None:
            variant = Variant.from_dict(route.get("variant"))
            raw_variant = variant.to_dict()  # what the metric says even if the workload fails
            workload = parse_workload(route.get("workload"), limits)
        else:
            variant, workload = parsed.variant, parsed.workload
            raw_variant = variant.to_dict()
        op_dict = workload.op.to_dict()
        flops, bytes_moved = workload.op.flops(), workload.op.bytes_moved(variant.precision)
        if link is not None:
            up, down = transfer_bytes(workload.op, workload.inputs)
            moved = (link_wait(link, link.rtt_ms / 2, up, wait), up + down)
        execution, exec_ms, throttled = _run(runtime, workload, variant, slowdown)
        if link is not None and moved is not None:
            moved = (moved[0] + link_wait(link, link.rtt_ms / 2, down, wait), moved[1])
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
    held_ms = (time.perf_counter_ns() - held_from) / 1e6
    return _records(route, runtime, device_id=device_id, queue_ms=queue_ms, decided=decided,
                    started_at_ms=started_at_ms, finished_at_ms=clock_ms(), held_ms=held_ms,
                    status=status, error=error, variant=raw_variant, op=op_dict, flops=flops,
                    bytes_moved=bytes_moved, execution=execution, exec_ms=exec_ms,
                    throttled=throttled, digest=digest, output_wire=output_wire,
                    batch_exec_ms=None, moved=moved)


def _records(
    route: dict[str, Any],
    runtime: Runtime,
    *,
    device_id: str,
    queue_ms: float,
    decided: float | None,
    started_at_ms: int,
    finished_at_ms: int,
    held_ms: float | None,
    status: str,
    error: str | None,
    variant: dict[str, Any],
    op: dict[str, Any],
    flops: float,
    bytes_moved: float,
    execution: Execution | None,
    exec_ms: float,
    throttled: bool,
    digest: str | None,
    output_wire: dict[str, Any] | None,
    batch_exec_ms: float | None,
    moved: tuple[float, int] | None = None,
) -> WorkResult:
    """The outcome and metric of one workload. A batched workload's metric says its share of
    the call (``exec_ms``), the call's time (``batch_exec_ms``) and ``batch_size``; its
    outcome's ``latency_ms`` is the call's time, which is how long the workload really took.
    ``held_ms``: from taking the route (or the call's routes) to the outcome, by the
    monotonic clock (the wall-clock timestamps are whole milliseconds: a sub-millisecond
    workload's hold read 0 or 1 ms)."""
    workload_id = route_id(route)
    raw_workload = _dict(route.get("workload"))
    submitted = _number(raw_workload.get("submitted_at_ms"))
    attempt = route.get("attempt") if type(route.get("attempt")) is int else 1
    batch_size = execution.batch_size if execution else 1
    energy_j = execution.energy_j if execution else None
    energy_simulated = bool(execution and execution.energy_simulated)
    if execution is not None and energy_j is None and runtime.power_model is not None:
        energy_j, energy_simulated = modelled_energy_j(runtime.power_model, exec_ms), True
    common = {
        "device_id": device_id,
        "device_class": runtime.device_class,
        "variant": variant,
        "queue_ms": queue_ms,
        "compile_ms": execution.compile_ms if execution else None,
        "energy_j": energy_j,
        "energy_simulated": energy_simulated,
        "error": error,
        "attempt": attempt,
        "simulated": runtime.simulated,
        "batch_size": batch_size,
        "transfer_ms": moved[0] if moved else None,
        "setup_ms": execution.setup_ms if execution else None,
    }
    outcome = {
        "id": workload_id,
        "status": status,
        "latency_ms": batch_exec_ms if batch_exec_ms is not None else exec_ms,
        "checksum": digest,
        "output": output_wire,
        "decided_at_ms": int(decided) if decided is not None else None,
        "finished_at_ms": finished_at_ms,
        "held_ms": held_ms,
        "submitted_at_ms": int(submitted) if submitted is not None else None,
        **common,
    }
    metric = {
        "workload_id": workload_id,
        "runtime": runtime.name,
        "op": op,
        "flops": flops,
        "bytes_moved": bytes_moved,
        "status": status,
        "exec_ms": exec_ms,
        "started_at_ms": started_at_ms,
        "finished_at_ms": finished_at_ms,
        "predicted_ms": _number(route.get("predicted_ms")),
        "cpu_ms": execution.cpu_ms if execution else None,
        "throttled": throttled,
        "batch_exec_ms": batch_exec_ms,
        "transfer_bytes": moved[1] if moved else None,
        "link_simulated": moved is not None,
        **common,
    }
    return WorkResult(outcome=outcome, metric=metric)


@dataclass(frozen=True)
class Parsed:
    """A route whose workload and variant parsed, ready to join a batch."""

    route: dict[str, Any]
    workload: Workload
    variant: Variant


def parse_route(route: dict[str, Any], limits: WorkloadLimits) -> Parsed | None:
    """The route's workload and variant parsed, or None when either does not parse (whatever
    fails here, :func:`perform` reports for this route alone)."""
    try:
        return Parsed(route, parse_workload(route.get("workload"), limits),
                      Variant.from_dict(route.get("variant")))
    except Exception:
        return None


def parsed_batch_key(parsed: Parsed, runtime: Runtime) -> Hashable | None:
    """What a parsed route may be batched on (its op's signature, shapes and dtype included,
    and its variant); None when it must run alone: its variant is not among the request's
    precisions, or the runtime does not batch it."""
    variant, workload = parsed.variant, parsed.workload
    if variant.precision not in workload.precisions or not runtime.batchable(
            workload.op.kind, variant.precision, variant.mode):
        return None
    return (workload.op.signature(), variant)


def plan(keys: Sequence[Hashable | None], max_batch: int) -> list[list[int]]:
    """Indices of ``keys`` grouped into batches: equal keys together, at most ``max_batch`` a
    group, groups in the order of their first member; a None key is a group of its own."""
    groups: list[list[int]] = []
    open_group: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        group = open_group.get(key) if key is not None else None
        if group is None or len(group) >= max_batch:
            group = [index]
            groups.append(group)
            if key is not None:
                open_group[key] = group
        else:
            group.append(index)
    return groups


def perform_batch(
    batch: Sequence[Parsed],
    runtime: Runtime,
    *,
    device_id: str,
    limits: WorkloadLimits,
    slowdown: float = 1.0,
    clock_ms: Callable[[], int] = now_ms,
) -> list[WorkResult]:
    """Run routes of one :func:`parsed_batch_key` as one batched call: one result per route, in
    order. Every workload of the call started when the call's inputs were made and finished
    when the last checksum was taken; the slowdown stretches the call as a whole. If the
    batched call fails, each route runs alone with :func:`perform`."""
    if len(batch) == 1:
        return [perform(batch[0].route, runtime, device_id=device_id, limits=limits,
                        slowdown=slowdown, clock_ms=clock_ms, parsed=batch[0])]
    started_at_ms = clock_ms()
    held_from = time.perf_counter_ns()
    first = batch[0]
    spec, variant = first.workload.op, first.variant
    try:
        inputs = [dict(p.workload.inputs) if p.workload.inputs is not None
                  else {} if runtime.simulated else make_inputs(spec, p.workload.seed)
                  for p in batch]
        executions = runtime.execute_batch(spec, variant, inputs)
        batch_ms = executions[0].batch_exec_ms
        if batch_ms is None:
            raise RuntimeError("execute_batch ran the workloads one by one")
    except Exception as exc:  # one bad workload must not fail the others: one by one
        logger.warning("batch of %d %s on %s failed (%s); running them one by one",
                       len(batch), spec.kind, runtime.device_class, exc)
        return [perform(p.route, runtime, device_id=device_id, limits=limits,
                        slowdown=slowdown, clock_ms=clock_ms) for p in batch]
    if slowdown > 1.0:
        start = time.perf_counter_ns()
        time.sleep((slowdown - 1.0) * batch_ms / 1e3)
        batch_ms += (time.perf_counter_ns() - start) / 1e6
    flops, bytes_moved = spec.flops(), spec.bytes_moved(variant.precision)
    op_dict = spec.to_dict()
    done = []
    for parsed, execution in zip(batch, executions, strict=True):
        output, digest, wire = execution.output, None, None
        if output is not None:
            digest = checksum(output)
            if (parsed.workload.return_output
                    and output.size <= limits.max_inline_elements):
                wire = encode_tensor(output.astype(spec.dtype))
        done.append((parsed, execution, digest, wire))
    held_ms = (time.perf_counter_ns() - held_from) / 1e6
    finished_at_ms = clock_ms()
    results = []
    for parsed, execution, digest, wire in done:
        decided = _number(parsed.route.get("decided_at_ms"))
        results.append(_records(
            parsed.route, runtime, device_id=device_id,
            queue_ms=max(0.0, started_at_ms - decided) if decided is not None else 0.0,
            decided=decided, started_at_ms=started_at_ms, finished_at_ms=finished_at_ms,
            held_ms=held_ms, status="ok", error=None, variant=variant.to_dict(), op=op_dict,
            flops=flops, bytes_moved=bytes_moved, execution=execution, exec_ms=batch_ms / len(batch),
            throttled=slowdown > 1.0, digest=digest, output_wire=wire, batch_exec_ms=batch_ms))
    return results
