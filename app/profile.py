"""``switchyard profile``: time a trace's ops in every variant one runtime supports, no Kafka.

The calibration and debugging tool StarPU and Triton users expect: each distinct op of the
trace runs once to warm up (reporting ``compile_ms`` when the variant compiles), then
``repeats`` timed runs; the table shows median and p90 execution time, achieved GFLOP/s and
the error against the float64 reference (for ops small enough to check quickly).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

from models.ops import OpSpec, SpecError, Variant, make_inputs, reference
from models.workload import parse_workload
from runtimes import Runtime, VariantRefused, get_runtime
from runtimes.affinity import cores_given_back, format_cpus, isolate
from runtimes.check import relative_error

logger = logging.getLogger(__name__)
# The float64 reference of a large conv or attention takes longer than the profile itself.
CHECK_MAX_ELEMENTS = 2**21


def load_trace_ops(path: Path) -> tuple[list[OpSpec], list[str]]:
    """Distinct ops of a JSONL workload trace, in first-seen order, and per-line problems."""
    ops: dict[str, OpSpec] = {}
    problems: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            workload = parse_workload(json.loads(line))
        except (ValueError, SpecError) as exc:
            problems.append(f"line {number}: {exc}")
            continue
        ops.setdefault(workload.op.signature(), workload.op)
    return list(ops.values()), problems


def profile_op(
    runtime: Runtime, spec: OpSpec, variant: Variant, repeats: int, seed: int = 0
) -> dict[str, Any]:
    """Warm up, then time ``repeats`` runs of one op in one variant; one row of the table."""
    inputs = {} if runtime.simulated else make_inputs(spec, seed)
    first = runtime.execute(spec, variant, inputs)
    runs = [runtime.execute(spec, variant, inputs) for _ in range(max(1, repeats))]
    times = np.array([r.exec_ms for r in runs])
    energies = [r.energy_j for r in runs if r.energy_j is not None]
    error = None
    if first.output is not None and spec.elements() <= CHECK_MAX_ELEMENTS:
        error = relative_error(runs[-1].output, reference(spec, inputs))
    median = float(np.median(times))
    return {
        "op": spec.signature(),
        "kind": spec.kind,
        "variant": variant.to_dict(),
        "median_ms": median,
        "p90_ms": float(np.percentile(times, 90)),
        "min_ms": float(times.min()),
        "compile_ms": first.compile_ms,
        "gflops": spec.flops() / (median * 1e6) if median > 0 else None,
        "energy_j": float(np.median(energies)) if energies else None,
        "rel_error": error,
        "repeats": len(runs),
    }


def profile_specs(runtime: Runtime, specs: list[OpSpec], repeats: int) -> list[dict[str, Any]]:
    """Rows for every (op, supported variant); failures become rows with an ``error``."""
    rows = []
    for spec in specs:
        for kind, precision, mode in runtime.capabilities():
            if kind != spec.kind:
                continue
            variant = Variant(precision, mode)
            try:
                rows.append(profile_op(runtime, spec, variant, repeats))
            except (VariantRefused, MemoryError, RuntimeError) as exc:
                rows.append(
                    {
                        "op": spec.signature(),
                        "kind": spec.kind,
                        "variant": variant.to_dict(),
                        "error": str(exc)[:200],
                    }
                )
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table of profile rows."""
    head = f"{'op':<58} {'variant':<14} {'median ms':>10} {'p90 ms':>10} {'compile ms':>11} {'GFLOP/s':>9} {'rel err':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        variant = f"{r['variant']['precision']}/{r['variant']['mode']}"
        op = r["op"] if len(r["op"]) <= 58 else r["op"][:55] + "..."
        if "error" in r:
            lines.append(f"{op:<58} {variant:<14} error: {r['error']}")
            continue
        lines.append(
            f"{op:<58} {variant:<14} {r['median_ms']:>10.4f} {r['p90_ms']:>10.4f} "
            f"{_fmt(r['compile_ms'], '.1f'):>11} {_fmt(r['gflops'], '.2f'):>9} {_fmt(r['rel_error'], '.1e'):>8}"
        )
    return "\n".join(lines)


def run_profile(
    runtime: str, device: str, trace_path: Path, threads: int | None, repeats: int,
    cpus: str | None = None,
) -> int:
    """Profile a trace on one runtime and print the table; returns the exit code."""
    try:
        specs, problems = load_trace_ops(Path(trace_path))
    except OSError as exc:
        print(f"cannot read trace {trace_path}: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"skipped {problem}", file=sys.stderr)
    with cores_given_back():  # run_profile is also called from Python
        try:
            threads, pinned = isolate(threads, cpus)
        except (ValueError, OSError) as exc:
            print(f"cannot pin to cpus: {exc}", file=sys.stderr)
            return 2
        try:
            rt = get_runtime(runtime, device, threads=threads)
        except (RuntimeError, ValueError) as exc:
            print(f"cannot start {runtime} on {device}: {exc}", file=sys.stderr)
            return 2
        label = " (SIMULATED)" if rt.simulated else ""
        where = f", pinned to cpu(s) {format_cpus(pinned)}" if pinned else ""
        print(f"{rt.device_class}{label}: {len(specs)} distinct ops, {repeats} timed runs "
              f"each{where}\n")
        rows = profile_specs(rt, specs, repeats)
        print(format_table(rows))
        return 0
