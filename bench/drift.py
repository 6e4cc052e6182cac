"""``switchyard bench drift``: one class slows down 4x mid-run, then recovers.

Two scenarios through the real pipeline: a simulated class slowed by the sim runtime's
``--drift`` schedule, and a live CPU executor throttled through ``--slowdown-file`` (the
executor really sleeps the extra time and reports it as execution). The share of decisions
that go to the affected class is binned over time; the report gives the time from the
slowdown until 80 % of its pre-drift share has moved away, and the time from the recovery
until it is back to 80 % of that share.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import fleets
from bench.common import (
    fmt,
    machine,
    markdown_table,
    pyplot,
    save_figure,
    section_header,
    update_benchmarks_md,
    write_json,
)
from bench.harness import ExecutorSpec, run_trace, start_cluster
from models.traces import poisson_gaps, synthetic_trace

WORKDIR = Path(os.environ.get("SWITCHYARD_BENCH_WORKDIR", "/tmp/switchyard-bench")) / "drift"
FACTOR = 4.0
BIN_S = 2.0
# Compute-bound ops only: there a 4x slower H100 really is slower than an L4, so all of its
# traffic can move (for memory-bound ops an H100 stays faster than an L4 even at 4x).
SIM_DRIFT_MIX = tuple((w, op) for w, op in fleets.SIM_MIX
                      if op["kind"] in ("matmul", "bmm", "linear", "mlp", "attention"))


def share_over_time(decided_ms: Sequence[float], is_target: Sequence[bool], origin_ms: float,
                    bin_s: float = BIN_S) -> tuple[np.ndarray, np.ndarray]:
    """(bin centres in s from ``origin_ms``, share of decisions in each bin that went to the
    target class); empty bins are NaN."""
    t = (np.asarray(decided_ms, dtype=float) - origin_ms) / 1e3
    target = np.asarray(is_target, dtype=bool)
    if t.size == 0:
        return np.array([]), np.array([])
    edges = np.arange(0.0, float(t.max()) + bin_s, bin_s)
    index = np.clip(np.digitize(t, edges) - 1, 0, len(edges) - 1)
    totals = np.bincount(index, minlength=len(edges)).astype(float)
    hits = np.bincount(index, weights=target.astype(float), minlength=len(edges))
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(totals > 0, hits / totals, np.nan)
    return edges + bin_s / 2, share


def adaptation_times(centres: np.ndarray, share: np.ndarray, onset_s: float,
                     recovery_s: float, fraction: float = 0.8) -> dict[str, float | None]:
    """Pre-drift share (mean of the bins before ``onset_s``, skipping the first third as
    warm-up); seconds from the onset until the share first falls to ``(1 - fraction)`` of it
    (80 % of its traffic moved away), and until it first falls to half of it; seconds from the
    recovery until it first climbs back to ``fraction`` of it. None where that never happened
    within the run. Also the median share over the second half of the slowed phase: what the
    class keeps once the policy has settled (some work can be right to leave on a slowed class,
    and a floor just above the 20 % line delays *moved* by however long the noise takes to dip
    under it)."""
    before = [s for c, s in zip(centres, share, strict=True)
              if onset_s / 3 <= c < onset_s and np.isfinite(s)]
    baseline = float(np.mean(before)) if before else None
    settled = [s for c, s in zip(centres, share, strict=True)
               if (onset_s + recovery_s) / 2 <= c - BIN_S / 2 and c + BIN_S / 2 <= recovery_s
               and np.isfinite(s)]
    out: dict[str, float | None] = {"baseline_share": baseline, "moved_s": None,
                                    "halved_s": None, "returned_s": None,
                                    "slowed_share": float(np.median(settled)) if settled else None}
    if not baseline:
        return out
    for key, level in (("moved_s", 1 - fraction), ("halved_s", 0.5)):
        for c, s in zip(centres, share, strict=True):
            if onset_s <= c - BIN_S / 2 < recovery_s and np.isfinite(s) \
                    and s <= level * baseline:
                out[key] = float(c + BIN_S / 2 - onset_s)
                break
    for c, s in zip(centres, share, strict=True):
        if c - BIN_S / 2 >= recovery_s and np.isfinite(s) and s >= fraction * baseline:
            out["returned_s"] = float(c + BIN_S / 2 - recovery_s)
            break
    return out


def detect_onset(results: dict[str, dict[str, Any]], ops: dict[str, dict[str, Any]],
                 target: str,
                 table: dict[str, dict[str, float]], scale: float, origin_ms: float,
                 nominal_s: float) -> float | None:
    """Seconds from ``origin_ms`` at which the first execution on ``target`` at or after the
    nominal onset ran over 2.5x its undrifted time (None when none did)."""
    from models.ops import Variant, parse_op
    from models.oracle import profile_key

    starts = []
    for workload_id, r in results.items():
        if r.get("device_class") != target or r.get("status") != "ok":
            continue
        op = parse_op(ops[workload_id])
        base = table.get(target, {}).get(profile_key(op, Variant.from_dict(r["variant"])))
        started = (float(r["finished_at_ms"]) - float(r["latency_ms"]) - origin_ms) / 1e3
        if base and started >= nominal_s - 1 and float(r["latency_ms"]) > 2.5 * base * scale:
            starts.append(started)
    return min(starts) if starts else None


def scenario(kind: str, policy: str, phase_s: tuple[float, float, float]) -> dict[str, Any]:
    """Run one drift scenario; ``phase_s`` = (before, slowed, after) durations of the trace."""
    before, slowed, after = phase_s
    slow_file = WORKDIR / f"slowdown-{policy}-{time.time_ns()}"
    slow_file.parent.mkdir(parents=True, exist_ok=True)
    slow_file.write_text("1")
    if kind == "sim":
        target = "sim-h100"
        fleet: list[ExecutorSpec] = [ExecutorSpec("sim", "h100", 1, threads=None),
                                     ExecutorSpec("sim", "l4", 3, threads=None)]
        mix = SIM_DRIFT_MIX
        ops = fleets.distinct_ops(mix)
        table = fleets.sim_true_ms(["sim-h100", "sim-l4"], ops, ("fp32",), 1.0)
        best = [fleets.best_ms(table, op, ("fp32",)) for op in ops]
        capacity = fleets.fluid_capacity([w for w, _ in mix], best, {"sim-h100": 1, "sim-l4": 3})
        rate = 12.0
        scale = 0.6 * capacity / rate  # 60 % load, at 12 workloads/s for the 2-core pipeline
    else:
        table = {}
        target = "torch-cpu-x86"
        fleet = [ExecutorSpec("torch", "cpu", 1, threads=1, slowdown_file=slow_file),
                 ExecutorSpec("numpy", "cpu", 1, threads=1)]
        mix = fleets.DRIFT_LIVE_MIX
        rate, scale = 15.0, 1.0
    spawn, lead = time.time(), 25.0
    if kind == "sim":
        # The schedule counts from each sim runtime's start, ~start-up before the trace: it is
        # set far enough out and the actual onset is found from the executions themselves.
        fleet = [dataclasses.replace(s, drift=f"0:{scale:.4f},{lead + before}:"
                                     f"{scale * FACTOR:.4f},{lead + before + slowed}:{scale:.4f}")
                 for s in fleet if s.device == "h100"] + \
                [dataclasses.replace(s, drift=f"0:{scale:.4f}") for s in fleet if s.device != "h100"]
    cluster = start_cluster(WORKDIR, fleet, {"SWITCHYARD_POLICY": policy})
    trace_start = time.time() + 0.5
    if kind == "sim":
        onset = spawn + lead + before - trace_start
        if onset < 10:
            cluster.stop()
            raise RuntimeError(f"start-up took {cluster.startup_s:.0f} s: drift began too early")
    else:
        onset = before
    recovery = onset + slowed
    count = int((recovery + after) * rate)
    trace = synthetic_trace(count, seed=3, mix=mix, id_prefix=f"{kind}-{policy}-")
    arrivals = np.cumsum(poisson_gaps(count, rate, seed=3)) + 0.5
    timers = []
    if kind == "live":
        timers = [threading.Timer(onset + 0.5, slow_file.write_text, (f"{FACTOR:g}",)),
                  threading.Timer(recovery + 0.5, slow_file.write_text, ("1",))]
        for timer in timers:
            timer.start()
    try:
        run = run_trace(cluster.namespace, trace, arrivals, 30.0)
    finally:
        for timer in timers:
            timer.cancel()
        cluster.stop()
    if kind == "sim":
        # The sim runtime counts from its own start (after its imports): find the real onset.
        first = detect_onset(run.results, {str(w["id"]): w["op"] for w in trace}, target, table, scale, trace_start * 1e3, onset)
        if first is not None:
            recovery += first - onset
            onset = first
    ids = [w for w in run.results if run.results[w].get("decided_at_ms")]
    decided = [float(run.results[w]["decided_at_ms"]) for w in ids]
    centres, share = share_over_time(decided, [run.results[w]["device_class"] == target
                                               for w in ids], trace_start * 1e3)
    times = adaptation_times(centres, share, onset, recovery)
    return {"kind": kind, "policy": policy, "target_class": target, "factor": FACTOR,
            "fleet": [s.label() for s in fleet], "rate_per_s": rate, "time_scale": scale,
            "workloads": count, "results": len(run.results), "onset_s": onset,
            "recovery_s": recovery, "bin_s": BIN_S, "centres_s": centres.tolist(),
            "share": share.tolist(), **times}


def plot(results: dict[str, Any], out_dir: Path) -> Path:
    """Share routed to the affected class over time, per scenario."""
    plt = pyplot()
    runs = results["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 3.8), squeeze=False)
    for ax, r in zip(axes[0], runs, strict=True):
        ax.plot(r["centres_s"], r["share"], marker=".", label=r["policy"])
        ax.axvspan(r["onset_s"], r["recovery_s"], color="red", alpha=0.12,
                   label=f"{r['factor']:g}x slower")
        if r.get("baseline_share"):
            ax.axhline(0.2 * r["baseline_share"], color="grey", linestyle=":", label="20 % of before")
        ax.set_xlabel("s since the trace started")
        ax.set_ylabel(f"share routed to {r['target_class']}")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{r['kind']}: {r['target_class']} ({r['policy']})")
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "drift")


def report(results: dict[str, Any], quick: bool) -> str:
    """The BENCHMARKS.md section."""
    command = "switchyard bench drift" + (" --quick" if quick else "")
    parts = [section_header("Drift: a class slows down 4x, then recovers", command,
                            results["machine"], quick)]
    parts.append(
        "Sim scenario: the H100 executor's `--drift` schedule multiplies its times by 4 and "
        "later back (every number SIMULATED; all sim devices uniformly slowed by the stated "
        "time scale so the 2-core pipeline can feed them). Live scenario: the torch executor's "
        "`--slowdown-file` goes from 1 to 4 and back, and it really sleeps the extra time. "
        f"Shares are per {BIN_S:g} s bin of decision time; *halved* and *moved* = time from the "
        "slowdown until the class's share first fell to 50 % and to 20 % of its pre-drift "
        "share; *share while slowed* = its median share over the second half of the slowed "
        "phase; *back* = time from the recovery until it first reached 80 % of the pre-drift "
        "share again. – = not within the run.")
    rows = [[r["kind"], r["policy"], r["target_class"], " + ".join(r["fleet"]),
             f"{r['rate_per_s']:g}", fmt(r["time_scale"], ".1f"),
             fmt(r["baseline_share"], ".2f"), fmt(r.get("slowed_share"), ".2f"),
             fmt(r.get("halved_s"), ".0f"), fmt(r["moved_s"], ".0f"),
             fmt(r["returned_s"], ".0f"), f"{r['results']}/{r['workloads']}"]
            for r in results["runs"]]
    parts.append(markdown_table(["scenario", "policy", "slowed class", "fleet", "rate /s",
                                 "time scale", "share before", "share while slowed",
                                 "halved s", "moved s", "back s", "results"], rows))
    parts.append("![drift](bench/out/drift.png)")
    return "\n\n".join(parts)


def run(quick: bool, out_dir: Path) -> int:
    """Entry point."""
    info = machine()
    phases = (30.0, 30.0, 30.0) if quick else (60.0, 60.0, 60.0)
    policies = ("switchyard",) if quick else ("switchyard", "dmda")
    runs = []
    for kind in ("sim", "live"):
        for policy in policies:
            result = scenario(kind, policy, phases)
            print(f"[drift] {kind}/{policy}: share before {fmt(result['baseline_share'], '.2f')}, "
                  f"moved {fmt(result['moved_s'], '.0f')} s, back {fmt(result['returned_s'], '.0f')} s",
                  flush=True)
            runs.append(result)
            write_json(out_dir, "drift", {"machine": info, "quick": quick, "runs": runs})
    results = {"machine": info, "quick": quick, "runs": runs}
    plot(results, out_dir)
    update_benchmarks_md("drift", report(results, quick))
    return 0
