"""``switchyard bench scheduling``: every policy on one trace, through the real pipeline.

For each device set the same trace (mixed ops, Poisson arrivals at the set's share — 50, 70 or
90 % — of the fluid capacity, per-workload deadlines) runs once per policy (or
``SWITCHYARD_BENCH_REPEATS`` times, the policies interleaved, the median run kept) on a
*fresh* cluster — new namespace, app id, worker and executors — so no policy inherits
another's learned state or warm caches. ``SWITCHYARD_BENCH_SETS`` and
``SWITCHYARD_BENCH_POLICIES`` rerun some sets or policies and keep the other figures. The
oracle is the earliest-finish rule fed the true costs: the simulator's roofline for sim
devices, an exhaustive in-process pre-profile for live ones (``models.oracle``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from app.settings import Settings
from app.submit import LINGER_MS
from bench import fleets
from bench.common import (
    attainment,
    fmt,
    machine,
    markdown_table,
    now_utc,
    pyplot,
    ratio,
    save_figure,
    section_header,
    summarize,
    update_benchmarks_md,
    write_json,
)
from bench.harness import Run, run_trace, start_cluster
from models.policy import POLICY_NAMES

logger = logging.getLogger(__name__)
TARGET_LOAD = 0.7
# Simulated devices run at catalog speed (time scale 1): 70 % of the sim fleet's fp32 capacity
# is ~353 workloads/s, which the 2-core machine feeds with the worker, the broker, ten executor
# processes and the client on it (BENCHMARKS.md, scheduling). Until 2026-12-05 the pipeline
# could not (one record per event-loop turn in Faust's fetcher and producer buffer), and the
# devices were slowed 7.06x so that 70 % was 50/s. SWITCHYARD_BENCH_SIM_RATE (workloads/s at
# 70 %) slows them uniformly again for a machine that cannot feed catalog speed; the time scale
# is then the same for the 50 % and 90 % sets, and relative speeds stay the catalog's.
SIM_RATE_PER_S = float(os.environ.get("SWITCHYARD_BENCH_SIM_RATE", "0")) or None
# The 120-device fleet's 70 % is ~3,150 workloads/s at catalog speed, three times what one
# worker sustains end to end on the 2-core machine (BENCHMARKS.md, pipeline): it runs slowed so
# that 70 % is this rate.
SIM120_RATE_PER_S = 300.0
LIVE_RATE_CAP_PER_S = 30.0
# Live executors share the machine's cores with the worker, the broker and (here) other work:
# at 70 % of the in-process profile's capacity even the oracle queued for seconds (measured on
# the 2-core development VM, load average ~5), so live sets are offered 40 %.
LIVE_TARGET_LOAD = float(os.environ.get("SWITCHYARD_BENCH_LIVE_LOAD", "0.4"))
STOPPERS: list[threading.Thread] = []
DEFAULT_ROUTE_PARTITIONS = int(Settings.model_fields["route_partitions"].default)
WORKDIR = Path(os.environ.get("SWITCHYARD_BENCH_WORKDIR", "/tmp/switchyard-bench"))


@dataclasses.dataclass(frozen=True)
class DeviceSet:
    """One scheduling scenario: a fleet, a mix and the precisions the trace allows."""

    name: str
    kind: str  # "sim" or "live"
    precisions: tuple[str, ...]
    # Offered load as a share of the fleet's fp32 fluid capacity (None: the kind's default,
    # TARGET_LOAD for sim sets, LIVE_TARGET_LOAD for live ones).
    load: float | None = None
    # The fleet (None: the kind's, fleets.SIM_FLEET or fleets.LIVE_FLEET).
    fleet: tuple[fleets.ExecutorSpec, ...] | None = None
    # Sim sets: the most workloads/s at 70 % this machine is asked to feed; a fleet faster
    # than that is slowed uniformly (None: SWITCHYARD_BENCH_SIM_RATE, else catalog speed).
    sim_rate_per_s: float | None = None


def prepare(device_set: DeviceSet, seconds: float, out_dir: Path) -> dict[str, Any]:
    """True costs, capacity, rate, trace and oracle profile of one device set."""
    live = device_set.kind == "live"
    fleet = device_set.fleet or (fleets.LIVE_FLEET if live else fleets.SIM_FLEET)
    mix = fleets.LIVE_MIX if live else fleets.SIM_MIX
    counts = fleets.fleet_classes(fleet)
    ops = fleets.distinct_ops(mix)
    if live:
        # What an executor holds a route of each option for (fleets.held_ms: inputs made,
        # the variant's conversions, execution, checksum). Until 2026-12-07 the execution
        # plus an fp32 workload's inputs and checksum: bf16's conversions (60-76 ms for a
        # 4096 x 2048 softmax) were unseen, the oracle sent such ops to bf16 and trailed
        # always-torch by 1.6x, and the static class on fp32 was JAX (its compilations unseen).
        table = fleets.live_profiles([s.runtime for s in fleet], ops, device_set.precisions, 5,
                                     held=True)[0]
        usable = max(1.0, (os.cpu_count() or 2) - 1.0)  # the worker and broker need a core
        servers = {c: n * min(1.0, usable / sum(counts.values())) for c, n in counts.items()}
    else:
        table = fleets.sim_true_ms(list(counts), ops, device_set.precisions, 1.0)
        servers = {c: float(n) for c, n in counts.items()}
    weights = [w for w, _ in mix]
    best = [fleets.best_ms(table, op, device_set.precisions) for op in ops]
    capacity = fleets.fluid_capacity(weights, best, servers)
    # The offered rate is 70 % of the fp32 capacity in every variant of a set, so a trace that
    # also allows bf16 shows what variant selection buys at the same load.
    fp32 = fleets.fluid_capacity(weights, [fleets.best_ms(table, op, ("fp32",)) for op in ops],
                                 servers)
    scale = 1.0
    sim_rate = device_set.sim_rate_per_s or SIM_RATE_PER_S
    if not live and sim_rate is not None and TARGET_LOAD * fp32 > sim_rate:
        scale = TARGET_LOAD * fp32 / sim_rate
        table = {c: {k: v * scale for k, v in e.items()} for c, e in table.items()}
        capacity, fp32 = capacity / scale, fp32 / scale
        fleet = tuple(dataclasses.replace(s, drift=f"0:{scale:.4f}") for s in fleet)
    load = device_set.load or (LIVE_TARGET_LOAD if live else TARGET_LOAD)
    rate = load * fp32
    if live and rate > LIVE_RATE_CAP_PER_S:
        rate = LIVE_RATE_CAP_PER_S  # beyond what the pipeline feeds: the load is then lower
    # The static class: the one that alone serves the most, as static runs it (fleets.baseline_ms).
    plain = [fleets.baseline_ms(table, op, device_set.precisions) for op in ops]
    single = {c: fleets.fluid_capacity(weights, plain, {c: servers[c]})
              if all(c in b for b in plain) else 0.0 for c in servers}
    count = max(20, int(seconds * rate))
    workloads, arrivals = fleets.build_trace(mix, count, rate, device_set.precisions, table,
                                             seed=7, id_prefix=f"{device_set.name}-")
    profile = write_json(out_dir, f"oracle_{device_set.name}",
                         {"true_ms": table, "time_scale": scale,
                          "source": "pre-profile, held" if live else "simulator roofline"})
    return {"fleet": fleet, "table": table, "capacity_per_s": capacity, "rate_per_s": rate,
            "load": rate / fp32, "time_scale": scale, "static_class": max(single, key=lambda c: single[c]),
            "single_class_capacity": single, "workloads": workloads, "arrivals": arrivals,
            "profile": profile, "sim_rate_per_s": sim_rate,
            # A route partition per device of the largest class: each device its own lane.
            "route_partitions": max(DEFAULT_ROUTE_PARTITIONS, *counts.values())}


def policy_stats(run: Run, workloads: list[dict[str, Any]], ended_ms: float) -> dict[str, Any]:
    """Completion statistics of one policy's run. Workloads without a result by ``ended_ms``
    count with their censored completion time (a lower bound) and are reported missing."""
    completion, deadlines = [], []
    for workload in workloads:
        wid = str(workload["id"])
        if wid in run.results:
            completion.append(run.completion_ms(wid))
        else:
            completion.append(ended_ms - run.sent.get(wid, ended_ms))
        deadlines.append(workload.get("deadline_ms"))
    ok = [r for r in run.results.values() if r.get("status") == "ok"]
    energies = [float(r["energy_j"]) for r in ok if r.get("energy_j") is not None]
    received = list(run.received.values())
    span_s = (max(received) - run.started_ms) / 1e3 if received else None
    # Decisions (route records) where they were watched: work routed to a class that never
    # finished it still counts in its share.
    shares = Counter(run.route_class.values()) if run.route_class else Counter(
        r.get("device_class") for r in run.results.values())
    variants = Counter(f"{r['variant'].get('precision')}/{r['variant'].get('mode')}"
                       for r in run.results.values() if isinstance(r.get("variant"), dict))
    total = max(1, sum(shares.values()))
    done = max(1, len(run.results))
    return {
        "sent": len(workloads), "completed": len(run.results), "ok": len(ok),
        "missing": len(workloads) - len(run.results),
        "completion_ms": summarize(completion),
        "execution_ms": summarize(float(r["latency_ms"]) for r in ok),
        # Where the time went: decided - produced, started - decided (queue at the executor),
        # and what is left of the completion after queue and execution (the Kafka hops).
        "decision_ms": summarize(float(r["decided_at_ms"]) - run.sent[w] for w, r in
                                 run.results.items() if r.get("decided_at_ms") is not None),
        "queue_ms": summarize(float(r["queue_ms"]) for r in ok),
        "overhead_ms": summarize(run.completion_ms(w) - float(r["queue_ms"])
                                 - float(r["latency_ms"]) for w, r in run.results.items()
                                 if r.get("status") == "ok"),
        # What placement decides (the wait at the device and the run there), apart from the
        # control plane's hops.
        "placement_ms": summarize(float(r["queue_ms"]) + float(r["latency_ms"]) for r in ok),
        "throughput_per_s": len(run.results) / span_s if span_s else None,
        "deadline_attainment": attainment(completion, deadlines),
        "energy_j": sum(energies) if energies else None,
        "energy_measured_share": len(energies) / max(1, len(ok)),
        "share": {str(k): v / total for k, v in sorted(shares.items(), key=str)},
        "variants": {k: v / done for k, v in sorted(variants.items())},
    }


def run_policy(device_set: DeviceSet, prepared: dict[str, Any], policy: str,
               drain_s: float) -> dict[str, Any]:
    """One policy on a fresh cluster; returns its statistics (with the start-up time)."""
    env = {"SWITCHYARD_POLICY": policy, "SWITCHYARD_SEED": "11",
           "SWITCHYARD_STATIC_CLASS": prepared["static_class"],
           "SWITCHYARD_ORACLE_PROFILE": str(prepared["profile"].resolve()),
           "SWITCHYARD_ROUTE_PARTITIONS": str(prepared["route_partitions"])}
    workloads = [{**w, "id": f"{policy}-{w['id']}"} for w in prepared["workloads"]]
    worker_cpus = fleets.live_cores()[0] if device_set.kind == "live" else None
    cluster = start_cluster(WORKDIR / device_set.name / policy, prepared["fleet"], env,
                            worker_cpus=worker_cpus)
    try:
        # The client as users run it (app/submit.py): its producer lingers 5 ms, where one
        # request per workload cost the machine the trace is measured on.
        run = run_trace(cluster.namespace, workloads, prepared["arrivals"], drain_s,
                        watch_routes=True, linger_ms=LINGER_MS)
        ended = time.time_ns() / 1e6
    finally:
        # Stopping (SIGTERM, waiting on a sim op up to its length) overlaps the next start-up:
        # it needs almost no CPU, and the next cluster shares nothing with this one.
        stopper = threading.Thread(target=cluster.stop, daemon=False)
        stopper.start()
        STOPPERS.append(stopper)
    stats = policy_stats(run, workloads, ended)
    stats["startup_s"] = cluster.startup_s
    return stats


def run_set(device_set: DeviceSet, seconds: float, drain_s: float, out_dir: Path,
            policies: tuple[str, ...] = POLICY_NAMES, repeats: int = 1) -> dict[str, Any]:
    """Every policy on one device set, ``repeats`` times each (interleaved; the median run
    by mean completion is kept); ratios to the oracle added."""
    prepared = prepare(device_set, seconds, out_dir)
    print(f"[scheduling] {device_set.name}: capacity {prepared['capacity_per_s']:.1f}/s, "
          f"rate {prepared['rate_per_s']:.1f}/s, {len(prepared['workloads'])} workloads, "
          f"time scale {prepared['time_scale']:.2f}, static {prepared['static_class']}",
          flush=True)
    out: dict[str, Any] = {
        "fleet": [s.label() for s in prepared["fleet"]], "precisions": device_set.precisions,
        "capacity_per_s": prepared["capacity_per_s"], "rate_per_s": prepared["rate_per_s"],
        "time_scale": prepared["time_scale"], "static_class": prepared["static_class"],
        "sim_rate_per_s": prepared["sim_rate_per_s"],
        "route_partitions": prepared["route_partitions"],
        "load_of_fp32_capacity": prepared["load"],
        "workloads": len(prepared["workloads"]), "trace_seconds": float(prepared["arrivals"][-1]),
        "deadline_rule": f"{fleets.DEADLINE_FLOOR_MS:.0f} ms + {fleets.DEADLINE_SLACK:g} x "
                         "best true execution time", "policies": {},
        "client_linger_ms": LINGER_MS, "measured_at": now_utc()}
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    if policies:
        out["warm_up"] = warm_up(device_set, prepared, policies[0], drain_s)
    for repeat in range(repeats):
        for policy in policies:  # interleaved: a slow spell of the machine hits every policy
            stats = one_run(device_set, prepared, policy, drain_s)
            runs[policy].append(stats)
            c = stats.get("completion_ms", {})
            print(f"[scheduling] {device_set.name} {policy:<11} run {repeat + 1}/{repeats} "
                  f"mean {fmt(c.get('mean'))} ms p99 {fmt(c.get('p99'))} ms, missing "
                  f"{stats.get('missing')}, placement {fmt(stats.get('placement_ms', {}).get('mean'))} "
                  f"ms, decide p50 {fmt(stats.get('decision_ms', {}).get('p50'))} ms, "
                  f"{stats['wall_s']:.0f} s", flush=True)
    for policy, done in runs.items():
        out["policies"][policy] = median_run(done)
    add_ratios(out)
    return out


def one_run(device_set: DeviceSet, prepared: dict[str, Any], policy: str,
            drain_s: float) -> dict[str, Any]:
    """`run_policy` with its wall time and when it ran; a failed run's error instead of its
    statistics."""
    started = time.monotonic()
    try:
        stats = run_policy(device_set, prepared, policy, drain_s)
    except (RuntimeError, TimeoutError) as exc:
        logger.error("%s/%s failed: %s", device_set.name, policy, exc)
        stats = {"error": str(exc)[-2000:]}
    stats["wall_s"] = time.monotonic() - started
    stats["measured_at"] = now_utc()
    return stats


def warm_up(device_set: DeviceSet, prepared: dict[str, Any], policy: str,
            drain_s: float) -> dict[str, Any]:
    """One run of ``policy`` before a set's measured runs, not kept. Live sets: the first run
    after the profile was the slowest of its policy's runs in every live set measured
    (2026-12-06, 8 sets: 495-872 ms mean completion against 154-606 for the same policy's
    later runs). Simulated sets: the first run on a freshly started broker was (2026-12-07,
    the EPYC: sim-fp32 2,078 ms against 320 and 333, load50 415 against 191 and 280). The
    first policy, switchyard, took that run each time, so its median was the slower of its
    two others. Returns what it measured, for the record."""
    stats = one_run(device_set, prepared, policy, drain_s)
    if "error" in stats:
        return {"policy": policy, "error": stats["error"]}
    mean = stats.get("completion_ms", {}).get("mean")
    print(f"[scheduling] {device_set.name} warm-up ({policy}, not kept) mean {fmt(mean)} ms, "
          f"{stats['wall_s']:.0f} s", flush=True)
    return {"policy": policy, "mean_ms": mean, "measured_at": stats["measured_at"]}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median mean completion (a failed run counts as the slowest), with
    every run's mean completion beside it."""
    def mean(stats: dict[str, Any]) -> float:
        return float(stats.get("completion_ms", {}).get("mean", float("inf")))

    ordered = sorted(runs, key=mean)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        chosen["runs_mean_ms"] = [mean(r) for r in runs]
    return chosen


def add_ratios(out: dict[str, Any]) -> None:
    """Each policy's completion statistics over the oracle's, in place."""
    oracle = out["policies"].get("oracle", {}).get("completion_ms", {})
    for stats in out["policies"].values():
        c = stats.get("completion_ms")
        if c:
            stats["ratio_to_oracle"] = {k: ratio(c[k], oracle.get(k))
                                        for k in ("mean", "p95", "p99")}


def plot(results: dict[str, Any], out_dir: Path) -> Path:
    """Mean/p95/p99 completion per policy, and the share of work per class, per device set."""
    plt = pyplot()
    sets = list(results["sets"])
    fig, axes = plt.subplots(2, len(sets), figsize=(6.5 * len(sets), 8), squeeze=False)
    for col, name in enumerate(sets):
        policies = {p: s for p, s in results["sets"][name]["policies"].items()
                    if "completion_ms" in s}
        names = list(policies)
        ax = axes[0][col]
        for i, stat in enumerate(("mean", "p95", "p99")):
            ax.bar([x + 0.27 * (i - 1) for x in range(len(names))],
                   [policies[p]["completion_ms"][stat] for p in names], width=0.27, label=stat)
        ax.set_xticks(range(len(names)), names, rotation=30)
        ax.set_yscale("log")
        ax.set_ylabel("completion time, ms (log)")
        ax.set_title(f"{name}: produced → result received")
        ax.legend()
        ax = axes[1][col]
        classes = sorted({c for s in policies.values() for c in s["share"]})
        bottom = [0.0] * len(names)
        for device_class in classes:
            values = [policies[p]["share"].get(device_class, 0.0) for p in names]
            ax.bar(range(len(names)), values, bottom=bottom, label=device_class)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xticks(range(len(names)), names, rotation=30)
        ax.set_ylabel("share of workloads")
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "scheduling")


def report(results: dict[str, Any], quick: bool) -> str:
    """The BENCHMARKS.md section."""
    command = "switchyard bench scheduling" + (" --quick" if quick else "")
    parts = [section_header("Scheduling: policies against the oracle", command,
                            results["machine"], quick)]
    parts.append(
        "Each policy ran the same trace on a fresh cluster (new namespace, app id, worker and "
        "executor processes) through the real broker. Completion = workload produced → its "
        "result received by the client (a set's line says where the client's producer "
        "lingered, as app/submit.py's does; before 2026-12-07 it sent each workload at once). "
        "Arrivals are Poisson at 70 % (simulated sets; 50 % "
        "and 90 % where the set's name says so) or "
        f"{100 * LIVE_TARGET_LOAD:.0f} % (live sets, whose executors share the cores with the "
        "worker and the broker) of the fleet's fp32 fluid capacity (perfect split of each op "
        "type over classes, true costs). A live set's true costs are a pre-profile of each "
        "runtime in a process of its own pinned to one core with one thread, as its executor "
        "runs: the whole time the executor holds a route of each option after a warm-up one "
        "(inputs made from the seed, the variant's conversions, the execution, the output's "
        "checksum; until 2026-12-07 the execution plus an fp32 workload's inputs and "
        "checksum, which missed bf16's conversions). In a live set the three executors "
        "share one core (the last), the worker has the others, the same for every policy (the broker and the "
        "client are not pinned); the capacity assumes that one core for the executors: three "
        "processes, each its own queue, taking turns on the core, except in "
        "live-cpu-fp32-one-queue, where one executor process hosts the three runtimes "
        "(`--runtime torch,jax,numpy`: one compute thread, their work one at a time in "
        "arrival order, one queue to the router). The "
        "live oracle plans with that profile, not with the "
        "times the executors then see side by side on a shared core: where another policy "
        "beats it, the profile was off, and a ratio to the oracle is a ratio to its plan. "
        "Placement ms is the mean wait at the device plus the execution there (what the "
        "policy decides); control ms is the mean of the rest of the completion (the decision "
        "and the Kafka hops: the control plane's cost, shared by every policy). Where a "
        "policy ran more than once (SWITCHYARD_BENCH_REPEATS; the policies interleaved), its "
        "row is the run with the median mean completion, and every run's mean is listed. "
        "Each set first runs its first policy once more, not kept (a warm-up: the first run "
        "after a live set's profile, or on a freshly started broker, was the slowest of its "
        "policy's runs in every set measured before, and it fell to the first policy each "
        "time). Workloads without a result when the drain period ended "
        "count with their censored time (a lower bound). Energy: only where an executor "
        "measured it (RAPL/NVML), otherwise –.\n")
    for name, data in results["sets"].items():
        parts.append(f"### {name}\n\nFleet: {', '.join(data['fleet'])}; precisions "
                     f"{', '.join(data['precisions'])}; {data['workloads']} workloads over "
                     f"{data['trace_seconds']:.0f} s at {data['rate_per_s']:.1f}/s (capacity "
                     f"{data['capacity_per_s']:.1f}/s); static = {data['static_class']}; "
                     f"deadline = {data['deadline_rule']}."
                     + (f" The client's producer lingered {data['client_linger_ms']:g} ms."
                        if data.get("client_linger_ms") else "")
                     + (f" Measured {data['measured_at']}." if data.get("measured_at") else "")
                     + (f" Warm-up run ({data['warm_up']['policy']}, not kept): mean "
                        f"{fmt(data['warm_up'].get('mean_ms'), '.0f')} ms."
                        if data.get("warm_up") else ""))
        if data["time_scale"] != 1.0:
            parts.append(f"Simulated devices (every figure here is SIMULATED), all slowed "
                         f"uniformly by {data['time_scale']:.2f}x (so that 70 % of the fleet's "
                         f"capacity is {data.get('sim_rate_per_s') or 0:.0f} workloads/s, what "
                         "this machine feeds); their relative speeds are the catalog's.")
        elif not name.startswith("live"):
            parts.append("Simulated devices (every figure here is SIMULATED) at catalog speed "
                         "(time scale 1).")
        rows = []
        # In the policy order (the stored JSON has its keys sorted).
        ordered = sorted(data["policies"].items(), key=lambda kv: (
            POLICY_NAMES.index(kv[0]) if kv[0] in POLICY_NAMES else len(POLICY_NAMES), kv[0]))
        for policy, s in ordered:
            if "completion_ms" not in s:
                rows.append([policy, "failed"] + [""] * 12)
                continue
            c, r = s["completion_ms"], s.get("ratio_to_oracle", {})
            runs = s.get("runs_mean_ms")
            rows.append([policy + (f" (rerun {s.get('measured_at')})" if s.get("rerun") else ""),
                         fmt(c["mean"]), fmt(c["p95"]), fmt(c["p99"]),
                         fmt(s.get("placement_ms", {}).get("mean")),
                         fmt(s.get("overhead_ms", {}).get("mean")),
                         " / ".join(fmt(m, ".0f") for m in runs) if runs else "1 run",
                         fmt(s["throughput_per_s"], ".1f"),
                         fmt(None if s["deadline_attainment"] is None
                             else 100 * s["deadline_attainment"], ".0f") + " %",
                         fmt(s["energy_j"], ".2f"), f"{s['missing']}",
                         fmt(r.get("mean"), ".2f"), fmt(r.get("p99"), ".2f"),
                         ", ".join(f"{k} {100 * v:.0f}%" for k, v in s["variants"].items())])
        parts.append(markdown_table(
            ["policy", "mean ms", "p95 ms", "p99 ms", "placement ms", "control ms",
             "runs' means ms", "done/s", "deadline met", "energy J",
             "missing", "mean ÷ oracle", "p99 ÷ oracle", "variants"], rows))
    parts.append("\n![scheduling](bench/out/scheduling.png)")
    return "\n\n".join(parts)


def run(quick: bool, out_dir: Path) -> int:
    """Entry point: returns 0 when every policy of every set produced numbers."""
    info = machine()
    if quick:
        sets, seconds, drain = [DeviceSet("sim-fp32", "sim", ("fp32",))], 8.0, 8.0
    else:
        sets = [DeviceSet("sim-fp32", "sim", ("fp32",)),
                DeviceSet("sim-fp32-load50", "sim", ("fp32",), 0.5),
                DeviceSet("sim-fp32-load90", "sim", ("fp32",), 0.9),
                DeviceSet("sim-bf16", "sim", ("fp32", "bf16")),
                DeviceSet("sim120-fp32", "sim", ("fp32",), fleet=fleets.SIM_FLEET_120,
                          sim_rate_per_s=SIM120_RATE_PER_S),
                DeviceSet("live-cpu-fp32", "live", ("fp32",)),
                DeviceSet("live-cpu-bf16", "live", ("fp32", "bf16")),
                DeviceSet("live-cpu-fp32-one-queue", "live", ("fp32",),
                          fleet=fleets.LIVE_FLEET_ONE_QUEUE)]
        seconds, drain = 20.0, 20.0
    results: dict[str, Any] = {"machine": info, "quick": quick, "sets": {}}
    # Re-run some sets (SWITCHYARD_BENCH_SETS) or some policies of each set
    # (SWITCHYARD_BENCH_POLICIES, e.g. switchyard after a change to it) of the full mode and
    # keep the other figures from the last run; each policy records when it was measured.
    only = [n for n in os.environ.get("SWITCHYARD_BENCH_SETS", "").split(",") if n]
    policies = tuple(p for p in os.environ.get("SWITCHYARD_BENCH_POLICIES", "").split(",")
                     if p) or POLICY_NAMES
    # Each policy's run repeated (SWITCHYARD_BENCH_REPEATS): one run's mean completion moved
    # by up to 2x between runs of the same policy on this shared machine.
    repeats = max(1, int(os.environ.get("SWITCHYARD_BENCH_REPEATS", "1")))
    if only:
        sets = [s for s in sets if s.name in only]
    if policies != POLICY_NAMES:
        # A live set's true costs are profiled again for every run, so its trace and oracle
        # change: a row rerun alone would not be comparable with the others.
        skipped = [s.name for s in sets if s.kind == "live"]
        sets = [s for s in sets if s.kind != "live"]
        if skipped:
            print(f"[scheduling] {', '.join(skipped)}: live sets rerun every policy or none "
                  "(their profile, trace and oracle change with each run)", flush=True)
    previous = out_dir / "scheduling.json"
    if (only or policies != POLICY_NAMES) and previous.exists():
        results["sets"] = json.loads(previous.read_text()).get("sets", {})
    for device_set in sets:
        fresh = run_set(device_set, seconds, drain, out_dir, policies, repeats)
        kept = results["sets"].get(device_set.name)
        if policies != POLICY_NAMES and kept:
            for stats in fresh["policies"].values():
                stats["rerun"] = True  # later than the rest of its set
            kept["policies"].update(fresh["policies"])
            add_ratios(kept)
            fresh = kept
        results["sets"][device_set.name] = fresh
        write_json(out_dir, "scheduling", results)  # keep what is done if a later set fails
    for stopper in STOPPERS:
        stopper.join()
    plot(results, out_dir)
    update_benchmarks_md("scheduling", report(results, quick))
    failed = [f"{n}/{p}" for n, d in results["sets"].items()
              for p, s in d["policies"].items() if "error" in s]
    if failed:
        print(f"[scheduling] failed: {', '.join(failed)}")
    return 1 if failed else 0
