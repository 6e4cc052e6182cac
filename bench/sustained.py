"""Issue 12, goal 2: a steady load, end to end, for a minute (part of ``switchyard bench
pipeline``; ``SWITCHYARD_BENCH_PARTS=sustained`` reruns it alone).

The broker, one worker and two simulated executors (SIMULATED devices: a catalog H100's
microsecond executions, slept) on this machine; Poisson arrivals at ``rate`` workloads/s
for ``seconds``, produced by this process as the client (app/submit.py) produces them (its
5 ms linger), which also reads every result and route back.
What it reports: how many results came back (missing: none within DRAIN_S), how many
workloads had more than one result record (the contract allows exactly one), the rate the
results came back at (10 % → 90 % of them), whether the pipeline kept up (completion at the
end of the load no worse than at its start: a pipeline that falls behind shows a completion
time that grows with the backlog), decision latency and what each process spent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from app.submit import LINGER_MS
from bench.common import fmt, summarize
from bench.harness import ExecutorSpec, Run, run_trace, start_cluster
from models.traces import poisson_gaps, synthetic_trace

WORKDIR = Path(os.environ.get("SWITCHYARD_BENCH_WORKDIR", "/tmp/switchyard-bench")) / "sustained"
FLEET = (ExecutorSpec("sim", "h100", 2, threads=None),)
EDGE_S = 10.0  # the first and last seconds of the load, compared for falling behind
DRAIN_S = 120.0  # how long results are awaited after the last workload was sent


def received_rate(run: Run) -> float | None:
    """Results per second between the 10th and the 90th percentile of their arrival."""
    times = sorted(run.received.values())
    if len(times) < 10:
        return None
    low, high = times[len(times) // 10], times[(9 * len(times)) // 10]
    return ((9 * len(times)) // 10 - len(times) // 10) / ((high - low) / 1e3) if high > low else None


def edge_completions(run: Run, seconds: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Completion times of the workloads sent in the load's first and last ``seconds``."""
    first = [run.completion_ms(w) for w, sent in run.sent.items()
             if w in run.received and sent - run.started_ms <= seconds * 1e3]
    last = [run.completion_ms(w) for w, sent in run.sent.items()
            if w in run.received and run.last_sent_ms - sent <= seconds * 1e3]
    return summarize(first), summarize(last)


def sustained(rate: float, seconds: float) -> dict[str, Any]:
    """One steady load through the whole pipeline; the figures above."""
    from bench.pipeline import cpu_seconds, process_roles

    cluster = start_cluster(WORKDIR, FLEET, {"SWITCHYARD_POLICY": "switchyard"})
    roles = process_roles(cluster)
    try:
        warm = synthetic_trace(40, seed=1, id_prefix="warm-")  # route topics exist after this
        run_trace(cluster.namespace, warm, np.cumsum(poisson_gaps(40, 20.0)), 30.0)
        count = int(rate * seconds)
        trace = synthetic_trace(count, seed=12, id_prefix="steady-")
        print(f"[sustained] {count} workloads at {rate:g}/s for {seconds:g} s ...", flush=True)
        before = cpu_seconds(roles)
        run = run_trace(cluster.namespace, trace, np.cumsum(poisson_gaps(count, rate)), DRAIN_S,
                        watch_routes=True, linger_ms=LINGER_MS)
        after = cpu_seconds(roles)
    finally:
        cluster.stop()
    first, last = edge_completions(run, EDGE_S)
    sending_s = (run.last_sent_ms - run.started_ms) / 1e3
    result = {
        "fleet": [s.label() for s in FLEET], "offered_per_s": rate, "seconds": seconds,
        "workloads": count, "client_linger_ms": LINGER_MS, "sent_per_s": count / sending_s if sending_s > 0 else None,
        "results": len(run.results), "missing": count - len(run.results), "drain_s": DRAIN_S,
        "duplicated": len(run.duplicate_results),
        "failed": sum(1 for r in run.results.values() if r.get("status") != "ok"),
        "results_per_s": received_rate(run),
        "completion_ms": summarize(run.completion_ms(w) for w in run.results),
        "completion_first_ms": first, "completion_last_ms": last,
        "decision_latency_ms": summarize(run.route_ts[w] - run.workload_ts[w]
                                         for w in run.route_ts if w in run.workload_ts),
        "cpu_share": {role: (after[role] - before[role]) / sending_s if sending_s > 0 else None
                      for role in roles},
    }
    kept_up = (result["missing"] == 0 and first["p50"] is not None and last["p50"] is not None
               and last["p50"] <= 2.0 * first["p50"] + 50.0)
    result["kept_up"] = kept_up
    print(f"[sustained] {result['results']}/{count} results ({result['duplicated']} duplicated) "
          f"at {fmt(result['results_per_s'], '.0f')}/s; completion p50 first {EDGE_S:g} s "
          f"{fmt(first['p50'])} ms, last {fmt(last['p50'])} ms; decision p99 "
          f"{fmt(result['decision_latency_ms']['p99'])} ms; kept up: {kept_up}", flush=True)
    return result


def report_sustained(result: dict[str, Any]) -> str:
    """The BENCHMARKS.md paragraph and table."""
    decision, completion = result["decision_latency_ms"], result["completion_ms"]
    first, last = result["completion_first_ms"], result["completion_last_ms"]
    verdict = ("It kept up: every workload has its result and completion at the end of the load "
               "was no worse than at its start." if result["kept_up"] else
               "It did **not** keep up: " + (f"{result['missing']} workloads had no result "
                                              f"{result['drain_s']:g} s after the last was sent; "
                                              if result["missing"] else "")
               + "completion grew over the load (work queued up in front of the worker or the "
               "executors).")
    text = (f"**Sustained load (issue 12, goal 2).** The broker, one worker and "
            f"{', '.join(result['fleet'])} (SIMULATED executions, catalog speed) on this "
            f"machine; Poisson arrivals at {result['offered_per_s']:g} workloads/s for "
            f"{result['seconds']:g} s ({result['workloads']} workloads; the load generator sent "
            f"{fmt(result['sent_per_s'], '.0f')}/s"
            + (f", its producer lingering {result['client_linger_ms']:g} ms as the client's "
               "(app/submit.py) does" if result.get("client_linger_ms") else "")
            + "), every result and route read back by the same process."
            + f" {verdict} CPU share = CPU seconds a process used over the load's "
            f"seconds (2.0 is both cores)."
            + (f" Measured {result['measured_at']}." if result.get("measured_at") else ""))
    table = "\n".join([
        "| results | missing | duplicated | results /s | completion p50 / p99 ms | first 10 s p50 "
        "| last 10 s p50 | decision p50 / p99 ms | CPU share: worker / executors / broker / "
        "load generator |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {result['results']}/{result['workloads']} | {result['missing']} | "
        f"{result['duplicated']} | {fmt(result['results_per_s'], '.0f')} | "
        f"{fmt(completion['p50'])} / {fmt(completion['p99'])} | {fmt(first['p50'])} | "
        f"{fmt(last['p50'])} | {fmt(decision['p50'])} / {fmt(decision['p99'])} | "
        + " / ".join(fmt(result["cpu_share"].get(role), ".2f")
                     for role in ("worker", "executors", "broker", "load generator"))
        + " |"])
    return text + "\n\n" + table
