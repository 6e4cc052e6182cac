"""Every CUDA check of the executors in one short run, without Kafka: ``python -m bench.cuda_check``.

For torch on ``cuda:0`` and jax on ``gpu:0`` (when jax has a CUDA backend), every op x
precision x mode the runtime supports runs on two shape sets:

- ``check``: moderate shapes, compared with the float64 NumPy reference at the per-precision
  tolerance of ``runtimes.check`` (a failure makes the exit code 1);
- ``perf``: large shapes where accelerators are near their roofline, timed only (eager).

Each row: median/p90 of ``--repeats`` timed runs (after warm-up, synchronised), compile time
where the mode compiles, achieved TFLOP/s and NVML energy per op (the counter read around all
repeats, divided by their number; ``-`` where NVML cannot be read). torch.compile rows run last
under ``--budget-s`` so the whole run stays within ~3 minutes on an H200; rows past the budget
are listed as skipped. Writes JSON to ``$OUT/cuda_check.json`` (or ``bench/out/``).
Exits 0 with a message where no GPU exists.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from models.ops import OpSpec, Variant, make_inputs, parse_op, reference
from runtimes import Runtime, get_runtime
from runtimes.check import TOLERANCE, relative_error

CHECK_OPS = [
    {"kind": "matmul", "m": 1024, "k": 1024, "n": 1024},
    {"kind": "bmm", "b": 16, "m": 256, "k": 128, "n": 256},
    {
        "kind": "linear",
        "batch": 512,
        "in_features": 1024,
        "out_features": 1024,
        "activation": "gelu",
    },
    {
        "kind": "conv2d",
        "batch": 8,
        "in_channels": 32,
        "out_channels": 64,
        "height": 32,
        "width": 32,
        "kernel": 3,
        "padding": 1,
    },
    {"kind": "attention", "batch": 2, "heads": 8, "seq_len": 256, "head_dim": 64, "causal": True},
    {"kind": "layernorm", "rows": 4096, "dim": 1024},
    {"kind": "softmax", "rows": 4096, "dim": 1024},
    {"kind": "mlp", "batch": 256, "dims": [1024, 2048, 1024], "activation": "gelu"},
]
PERF_OPS = [
    {"kind": "matmul", "m": 8192, "k": 8192, "n": 8192},
    {"kind": "bmm", "b": 64, "m": 1024, "k": 1024, "n": 1024},
    {
        "kind": "linear",
        "batch": 8192,
        "in_features": 4096,
        "out_features": 4096,
        "activation": "gelu",
    },
    {
        "kind": "conv2d",
        "batch": 64,
        "in_channels": 128,
        "out_channels": 128,
        "height": 56,
        "width": 56,
        "kernel": 3,
        "padding": 1,
    },
    {"kind": "attention", "batch": 8, "heads": 16, "seq_len": 2048, "head_dim": 128},
    {"kind": "layernorm", "rows": 16384, "dim": 4096},
    {"kind": "softmax", "rows": 16384, "dim": 4096},
    {"kind": "mlp", "batch": 8192, "dims": [4096, 16384, 4096], "activation": "gelu"},
]


def measure(
    rt: Runtime,
    spec: OpSpec,
    variant: Variant,
    inputs: dict[str, np.ndarray],
    repeats: int,
    ref: np.ndarray | None,
) -> dict[str, Any]:
    """One table row: warm-up (compile), ``repeats`` timed runs, energy, error."""
    first = rt.execute(spec, variant, inputs)
    before = rt.meter.sample()
    runs = [rt.execute(spec, variant, inputs) for _ in range(repeats)]
    joules = rt.meter.joules(before, rt.meter.sample())
    times = np.array([r.exec_ms for r in runs])
    median = float(np.median(times))
    error = relative_error(runs[-1].output, ref) if ref is not None else None
    return {
        "median_ms": median,
        "p90_ms": float(np.percentile(times, 90)),
        "compile_ms": first.compile_ms,
        "tflops": spec.flops() / (median * 1e9) if median > 0 else None,
        # Between the two samples the device also ran Python overhead and idled: an upper bound
        # on the op's energy, per op.
        "energy_j_per_op": joules / repeats if joules is not None else None,
        "rel_error": error,
        "ok": None if error is None else bool(error <= TOLERANCE[variant.precision]),
    }


def run_runtime(rt: Runtime, repeats: int, deadline: float, rows: list[dict[str, Any]]) -> None:
    """Fill ``rows`` for one runtime: check set (all modes), then perf set (eager)."""
    plan: list[tuple[str, OpSpec, Variant]] = []
    for label, ops, modes in (
        ("check", CHECK_OPS, ("eager", "compiled")),
        ("perf", PERF_OPS, ("eager",)),
    ):
        for op in ops:
            spec = parse_op(op)
            for kind, precision, mode in rt.capabilities():
                if kind == spec.kind and mode in modes:
                    plan.append((label, spec, Variant(precision, mode)))
    # Compiled torch variants take seconds each to build: they go last, under the budget.
    plan.sort(key=lambda p: (rt.name == "torch" and p[2].mode == "compiled", p[0] != "check"))
    refs: dict[str, np.ndarray] = {}
    cached: tuple[str, dict[str, np.ndarray]] = ("", {})  # one op's inputs (GBs for perf ops)
    for label, spec, variant in plan:
        row: dict[str, Any] = {
            "runtime": rt.device_class,
            "set": label,
            "op": spec.signature(),
            "variant": str(variant),
        }
        if time.monotonic() > deadline:
            rows.append({**row, "skipped": "time budget"})
            continue
        if cached[0] != spec.signature():
            cached = ("", {})  # free the previous op's arrays before making the next ones
            cached = (spec.signature(), make_inputs(spec, seed=1))
        inputs = cached[1]
        ref = None
        if label == "check":
            if spec.signature() not in refs:
                refs[spec.signature()] = reference(spec, inputs)
            ref = refs[spec.signature()]
        try:
            row.update(measure(rt, spec, variant, inputs, repeats, ref))
        except Exception as exc:  # one failing variant must not hide the rest of the table
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
        rows.append(row)
        print(format_row(row), flush=True)


def _f(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_row(r: dict[str, Any]) -> str:
    """One fixed-width line of the table."""
    head = f"{r['runtime']:<18} {r['set']:<5} {r['op'][:52]:<52} {r['variant']:<14}"
    if "skipped" in r:
        return f"{head} skipped: {r['skipped']}"
    if "error" in r:
        return f"{head} ERROR {r['error']}"
    status = {True: "ok", False: "FAIL", None: ""}[r["ok"]]
    return (
        f"{head} {r['median_ms']:>9.3f} {r['p90_ms']:>9.3f} {_f(r['compile_ms'], '.0f'):>8} "
        f"{_f(r['tflops'], '.1f'):>7} {_f(r['energy_j_per_op'], '.4f'):>9} "
        f"{_f(r['rel_error'], '.1e'):>8} {status}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the checks; exit 0 when all pass or no GPU exists, 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument("--runtimes", default="torch,jax")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here (torch.cuda.is_available() is false): nothing to check")
        return 0
    started = time.monotonic()
    deadline = started + args.budget_s
    info = {
        "gpu": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
    }
    print(json.dumps(info))
    print(
        f"{'class':<18} {'set':<5} {'op':<52} {'variant':<14} {'med ms':>9} {'p90 ms':>9} "
        f"{'comp ms':>8} {'TFLOP/s':>7} {'J/op':>9} {'rel err':>8}"
    )
    rows: list[dict[str, Any]] = []
    for name in args.runtimes.split(","):
        try:
            rt = get_runtime(name, "cuda:0")
        except (RuntimeError, ValueError) as exc:
            print(f"{name}: no CUDA device ({exc})")
            continue
        run_runtime(rt, args.repeats, deadline, rows)
        rt.close()
    failed = [r for r in rows if r.get("ok") is False]
    out_dir = Path(os.environ.get("OUT") or Path(__file__).parent / "out")
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {**info, "rows": rows, "failed": len(failed), "wall_s": time.monotonic() - started}
    (out_dir / "cuda_check.json").write_text(json.dumps(report, indent=1))
    print(
        f"\n{len(rows)} rows, {len(failed)} failed, "
        f"{sum('skipped' in r for r in rows)} skipped, {report['wall_s']:.0f} s; "
        f"JSON in {out_dir / 'cuda_check.json'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
