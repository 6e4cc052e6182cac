"""Placement at fleet scale, in process: ``switchyard bench fleetsim [--quick]``.

SIMULATED, all of it. A discrete-event simulation of a fleet of simulated devices at catalog
speed (time scale 1) — one of ten devices in four classes (the scheduling benchmark's fleet)
and one of 120 devices in five classes — fed Poisson traces at 50, 70 and 90 % of the fleet's
fp32 fluid capacity, fp32 only and with bf16 allowed. It answers what the Kafka benchmark
cannot on a 2-core machine: how the policies place work on a hundred devices, at the devices'
own speed, with no control plane in the way.

What is real: every decision is made by the policy code the worker runs (``models.policy``
and ``models.baselines`` through ``models.routing.offers``/``choose``), with the worker's
per-class backlog (``models.backlog.Backlog``, pace included), and the switchyard and dmda
policies learn from every completed execution with the worker's cost model
(``models.costmodel.CostModel``) and history (``models.history.HistoryModel``).

What is simulated, and how it differs from the pipeline:
- a device runs one workload at a time for the simulator's roofline time (``models.oracle.
  simulated_ms``, the time ``runtimes/sim_rt.py`` sleeps) times median-1 lognormal noise
  (sigma 0.05, the simulator's default), its routes in FIFO order. As in the pipeline, a
  policy picks a class and the worker picks the device: the one holding the least routed,
  unfinished work (``within="least"``: ``models.dispatch.route_partition`` over the worker's
  per-partition backlog, one route partition per device). ``within="hash"`` is the dispatch
  before it, a route's device drawn by its key's hash; ``within="shared"`` one queue for all
  the class's devices (no executor's queue, what a class-level queue would give);
- decisions take no time and models update at each completion: no Kafka hops, no metric
  batching, no 0.1 s view refresh, no executor dispatch overhead (the pipeline's are measured
  in the scheduling and pipeline benchmarks);
- the decision's CPU time *is* measured (``decide_us``): the cost of routing one workload over
  this many classes and variants, in this process.

Besides the worker's policies, ``dmda-calibrated`` is StarPU's dmda as its users run it: after
an offline calibration run (``STARPU_CALIBRATE``), simulated here as ``calibrate_minimum`` noisy
runs of every (shape, class, variant) of the trace recorded in its history before the trace
starts. Uncalibrated, dmda sends every workload of a new shape to the class being calibrated
until its runs complete — on a slow class, seconds of arrivals.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import fleets
from bench.common import (
    attainment,
    fmt,
    machine,
    markdown_table,
    now_utc,
    pyplot,
    ratio,
    section_header,
    summarize,
    update_benchmarks_md,
    write_json,
)
from models.backlog import Backlog
from models.costmodel import CostModel, CostModelLike
from models.dispatch import device_wait_ms, route_partition
from models.history import CALIBRATE_MINIMUM, HistoryModel
from models.ops import Variant
from models.oracle import profile_key, true_costs_from
from models.policy import POLICY_NAMES, Policy, make_policy
from models.registry import ClassView
from models.routing import Snapshot, choose, offers
from models.setup import WarmRoutes
from models.workload import Workload, WorkloadLimits, parse_workload
from runtimes.sim_rt import SimRuntime

NOISE_SIGMA = 0.05  # runtimes/sim_rt.py's default
WITHIN = ("least", "hash", "shared")  # how a class's devices share its routes (FleetSim)
LOADS = (0.5, 0.7, 0.9)
# Device model -> instances. The small fleet is the scheduling benchmark's (bench/fleets.py
# SIM_FLEET); the large one adds A100s and scales every class up, 120 devices in five classes.
FLEETS: dict[str, dict[str, int]] = {
    "fleet10": {"h100": 2, "l4": 4, "tpu-v5e": 2, "cpu-core": 2},
    "fleet120": fleets.FLEET_120,
}
FULL_WORKLOADS, QUICK_WORKLOADS = 12000, 600
SEED = 7


@dataclass(frozen=True)
class SimSet:
    """One simulated set: a fleet, the precisions workloads allow, the offered load."""

    fleet: str
    precisions: tuple[str, ...]
    load: float
    # Every device this many times slower than the catalog (and the rate as much lower): the
    # scheduling benchmark's slowed fleet, where every roofline prior is optimistic alike.
    slowdown: float = 1.0

    @property
    def name(self) -> str:
        precision = "bf16" if "bf16" in self.precisions else "fp32"
        slowed = "" if self.slowdown == 1.0 else f"-slowed{self.slowdown:g}x"
        return f"{self.fleet}-{precision}-load{round(self.load * 100)}{slowed}"


def sim_sets(quick: bool) -> list[SimSet]:
    """Every fleet at every load in fp32, and at 70 % with bf16 allowed (quick: the large
    fleet at 70 % only)."""
    if quick:
        return [SimSet("fleet120", ("fp32",), 0.7)]
    out = [SimSet(f, ("fp32",), load) for f in FLEETS for load in LOADS]
    out += [SimSet(f, ("fp32", "bf16"), 0.7) for f in FLEETS]
    # The scheduling benchmark's time scale (bench/scheduling.py: ~7x at 50 workloads/s).
    out.append(SimSet("fleet10", ("fp32",), 0.7, slowdown=7.0))
    return out


def prepare(sim_set: SimSet, count: int) -> dict[str, Any]:
    """The set's classes, true costs (catalog speed x the set's slowdown), capacity, rate
    and trace."""
    counts = {f"sim-{d}": n for d, n in FLEETS[sim_set.fleet].items()}
    ops = fleets.distinct_ops(fleets.SIM_MIX)
    weights = [w for w, _ in fleets.SIM_MIX]
    table = fleets.sim_true_ms(list(counts), ops, sim_set.precisions, sim_set.slowdown)
    servers = {c: float(n) for c, n in counts.items()}
    best = [fleets.best_ms(table, op, sim_set.precisions) for op in ops]
    fp32 = fleets.fluid_capacity(weights, [fleets.best_ms(table, op, ("fp32",)) for op in ops],
                                 servers)
    rate = sim_set.load * fp32
    single = {c: fleets.fluid_capacity(weights, best, {c: servers[c]})
              if all(c in b for b in best) else 0.0 for c in servers}
    workloads, arrivals = fleets.build_trace(fleets.SIM_MIX, count, rate, sim_set.precisions,
                                             table, seed=SEED, id_prefix=f"{sim_set.name}-")
    # One route partition per device, as an executor reports its share in its heartbeats.
    classes = {c: ClassView(c, n, frozenset(SimRuntime(c).capabilities()), simulated=True,
                            route_partitions=tuple((f"{c}-{k}", (k,)) for k in range(n)))
               for c, n in counts.items()}
    return {"counts": counts, "classes": classes, "table": table, "rate_per_s": rate,
            "fp32_capacity_per_s": fp32,
            "capacity_per_s": fleets.fluid_capacity(weights, best, servers),
            "static_class": max(single, key=lambda c: single[c]),
            "workloads": workloads, "arrivals_ms": np.asarray(arrivals) * 1000.0}


CALIBRATED_DMDA = "dmda-calibrated"
POLICIES = (*POLICY_NAMES, CALIBRATED_DMDA)
HASHED = "switchyard, routes by key hash"
SHARED = "switchyard, one queue per class"
EXTRA_ROWS = {HASHED: "hash", SHARED: "shared"}


def make(policy: str, prepared: dict[str, Any]) -> Policy:
    """The policy as the worker builds it (agents/decide.py); dmda-calibrated is dmda."""
    if policy == CALIBRATED_DMDA:
        return make_policy("dmda")
    if policy == "static":
        return make_policy(policy, device_class=prepared["static_class"])
    if policy == "oracle":
        return make_policy(policy, true_ms=true_costs_from(prepared["table"]))
    return make_policy(policy)


class FleetSim:
    """One policy over one trace: arrivals decided at once, FIFO per class, n servers."""

    def __init__(self, prepared: dict[str, Any], policy: Policy, seed: int = 11,
                 within: str = "least") -> None:
        if within not in WITHIN:
            raise ValueError(f"within is one of {WITHIN}, not {within!r}")
        self.p = prepared
        self.policy = policy
        self.rng = np.random.default_rng(seed)  # the policy's draws, as the worker's seed
        self.noise = np.random.default_rng(seed + 1)  # the devices' run-to-run noise
        self.backlog = Backlog()
        self.models: dict[str, CostModel] = {}
        self.history = HistoryModel()
        self.warm = WarmRoutes()
        self.spread = np.random.default_rng(seed + 2)  # a route's partition: its key's hash
        # A class's lanes: a FIFO and its free devices. "least" and "hash": one lane per
        # device (its route partition); "shared": one lane, all the class's devices.
        self.within = within
        counts = prepared["counts"]
        self.lanes: dict[str, list[tuple[deque[int], list[int]]]] = {
            c: ([(deque(), [n])] if within == "shared" else [(deque(), [1]) for _ in range(n)])
            for c, n in counts.items()}
        self.lane_of = np.zeros(0, dtype=int)
        self.events: list[tuple[float, int, int]] = []  # (end ms, seq, workload index)
        self.now = 0.0  # the simulated clock (ms), at the arrival being decided
        self.seq = 0

    def calibrate(self, parsed: list[Workload], runs: int) -> None:
        """An offline calibration run: ``runs`` noisy executions of every (shape, class,
        variant) the trace holds, in the history before the trace starts."""
        seen = set()
        for workload in parsed:
            if workload.op.signature() in seen:
                continue
            seen.add(workload.op.signature())
            for device_class, view in self.p["classes"].items():
                for kind, precision, mode in view.capabilities:
                    if kind != workload.op.kind or precision not in workload.precisions:
                        continue
                    variant = Variant(precision, mode)
                    true_ms = self.p["table"][device_class][profile_key(workload.op, variant)]
                    for _ in range(runs):
                        self.history.observe(device_class, workload.op, variant, true_ms
                                             * float(self.noise.lognormal(0.0, NOISE_SIGMA)))

    def run(self, parsed: list[Workload]) -> dict[str, Any]:
        n = len(parsed)
        arrivals = self.p["arrivals_ms"]
        self.decision: list[Any] = [None] * n
        self.start = np.zeros(n)
        self.end = np.zeros(n)
        self.charged = np.zeros(n)
        self.lane_of = np.zeros(n, dtype=int)
        self.parsed = parsed
        decide_s = 0.0
        for i in range(n):
            now = self.now = float(arrivals[i])
            self._complete_until(now)
            began = time.perf_counter()
            self._decide(i)
            decide_s += time.perf_counter() - began
            self._dispatch(self.decision[i].device_class, int(self.lane_of[i]), now)
        self._complete_until(math.inf)
        return self._stats(decide_s)

    def _decide(self, i: int) -> None:
        workload = self.parsed[i]
        learned: dict[str, CostModelLike] = {c: m for c, m in self.models.items() if m.samples}
        snapshot = Snapshot(self.p["classes"], {c: self.backlog.ms(c) for c in self.lanes},
                            learned, {})
        if self.within == "least":  # the worker's: the wait at the device the route goes to
            snapshot.device_wait_ms = {c: device_wait_ms(self.backlog, view, 0.0, self.now)
                                       for c, view in self.p["classes"].items()}
        candidates = offers(workload, snapshot, self.warm)
        history = self.history if self.policy.name == "dmda" else None
        decision = choose(self.policy, workload, candidates, learned, history, self.rng)
        self.warm.mark(decision.device_class, (workload.op.signature(),
                                               decision.variant.precision, decision.variant.mode))
        self.charged[i] = float(decision.predicted_ms) + decision.setup_ms
        self.decision[i] = decision
        lanes = self.lanes[decision.device_class]
        if self.within == "least":
            lane = route_partition(self.backlog, self.p["classes"][decision.device_class])
            self.lane_of[i] = 0 if lane is None else lane
        elif self.within == "hash":
            self.lane_of[i] = int(self.spread.integers(len(lanes)))
        self.backlog.add_entry(self._entry(i))
        lanes[self.lane_of[i]][0].append(i)

    def _entry(self, i: int) -> dict[str, Any]:
        """Workload ``i``'s in-flight entry, as far as the backlog reads one."""
        return {"device_class": self.decision[i].device_class, "charged_ms": self.charged[i],
                "route_partition": int(self.lane_of[i]),
                "decided_at_ms": float(self.p["arrivals_ms"][i])}

    def _dispatch(self, device_class: str, lane: int, now: float) -> None:
        queue, free = self.lanes[device_class][lane]
        while queue and free[0] > 0:
            i = queue.popleft()
            free[0] -= 1
            decision = self.decision[i]
            true_ms = self.p["table"][device_class][profile_key(self.parsed[i].op,
                                                                decision.variant)]
            self.start[i] = now
            self.end[i] = now + true_ms * float(self.noise.lognormal(0.0, NOISE_SIGMA))
            self.seq += 1
            heapq.heappush(self.events, (self.end[i], self.seq, i))

    def _complete_until(self, now: float) -> None:
        while self.events and self.events[0][0] <= now:
            end, _, i = heapq.heappop(self.events)
            decision = self.decision[i]
            device_class = decision.device_class
            exec_ms = end - self.start[i]
            self.backlog.remove_entry(self._entry(i), end)
            self.backlog.observe(device_class, self.charged[i], exec_ms)
            op, variant = self.parsed[i].op, decision.variant
            model = self.models.get(device_class)
            if model is None:
                model = self.models[device_class] = CostModel.for_class(device_class)
            model.learn_one(op, variant, exec_ms)
            self.history.observe(device_class, op, variant, exec_ms)
            self.lanes[device_class][self.lane_of[i]][1][0] += 1
            self._dispatch(device_class, int(self.lane_of[i]), end)

    def _stats(self, decide_s: float) -> dict[str, Any]:
        arrivals = self.p["arrivals_ms"]
        completion = self.end - arrivals
        deadlines = [w.deadline_ms for w in self.parsed]
        shares = Counter(d.device_class for d in self.decision)
        variants = Counter(f"{d.variant.precision}/{d.variant.mode}" for d in self.decision)
        n = len(self.parsed)
        return {
            "completed": n,
            "completion_ms": summarize(completion),
            "queue_ms": summarize(self.start - arrivals),
            "execution_ms": summarize(self.end - self.start),
            "deadline_attainment": attainment(list(completion), deadlines),
            "share": {c: shares[c] / n for c in sorted(shares)},
            "variants": {v: variants[v] / n for v in sorted(variants)},
            "decide_us": 1e6 * decide_s / max(1, n),
            "makespan_s": float(self.end.max() - arrivals[0]) / 1000.0,
        }


def run_set(sim_set: SimSet, count: int) -> dict[str, Any]:
    """Every policy on one set; ratios to the oracle added."""
    prepared = prepare(sim_set, count)
    limits = WorkloadLimits()
    parsed = [parse_workload(w, limits) for w in prepared["workloads"]]
    out: dict[str, Any] = {
        "fleet": prepared["counts"], "devices": sum(prepared["counts"].values()),
        "precisions": list(sim_set.precisions), "load_of_fp32_capacity": sim_set.load,
        "rate_per_s": prepared["rate_per_s"], "capacity_per_s": prepared["capacity_per_s"],
        "fp32_capacity_per_s": prepared["fp32_capacity_per_s"],
        "static_class": prepared["static_class"], "workloads": count,
        "trace_seconds": float(prepared["arrivals_ms"][-1] / 1000.0),
        "simulated": True, "policies": {}, "measured_at": now_utc()}
    print(f"[fleetsim] {sim_set.name}: {out['devices']} devices, rate "
          f"{prepared['rate_per_s']:.0f}/s, {count} workloads", flush=True)
    for name in (*POLICIES, *EXTRA_ROWS):
        began = time.monotonic()
        if name in EXTRA_ROWS:  # switchyard's classes, another dispatch within them
            sim = FleetSim(prepared, make("switchyard", prepared), within=EXTRA_ROWS[name])
        else:
            sim = FleetSim(prepared, make(name, prepared))
        if name == CALIBRATED_DMDA:
            sim.calibrate(parsed, CALIBRATE_MINIMUM)
        stats = sim.run(parsed)
        stats["wall_s"] = time.monotonic() - began
        out["policies"][name] = stats
        c = stats["completion_ms"]
        print(f"[fleetsim] {sim_set.name} {name:<11} mean {fmt(c['mean'])} ms p99 "
              f"{fmt(c['p99'])} ms, decide {stats['decide_us']:.0f} µs, "
              f"{stats['wall_s']:.1f} s", flush=True)
    oracle = out["policies"]["oracle"]["completion_ms"]
    for stats in out["policies"].values():
        c = stats["completion_ms"]
        stats["ratio_to_oracle"] = {k: ratio(c[k], oracle[k]) for k in ("mean", "p99")}
    return out


BASELINES = ("round_robin", "random", "pow2", "jsq", "static", "dmda", CALIBRATED_DMDA)


def verdict(data: dict[str, Any]) -> dict[str, Any]:
    """Switchyard against the issue's goals on one set: mean ≤ 1.15× the oracle, ≤ 0.9× the
    best baseline, p99 no worse than the best baseline's."""
    pol = data["policies"]
    best = min(BASELINES, key=lambda p: pol[p]["completion_ms"]["mean"])
    best_p99 = min(pol[p]["completion_ms"]["p99"] for p in BASELINES)
    sy = pol["switchyard"]["completion_ms"]
    return {"best_baseline": best,
            "vs_oracle": ratio(sy["mean"], pol["oracle"]["completion_ms"]["mean"]),
            "vs_best_baseline": ratio(sy["mean"], pol[best]["completion_ms"]["mean"]),
            "p99_vs_best_baseline": ratio(sy["p99"], best_p99)}


def report(results: dict[str, Any], quick: bool) -> str:
    command = "switchyard bench fleetsim" + (" --quick" if quick else "")
    parts = [section_header("Fleet simulation: placement on 10 and 120 simulated devices",
                            command, results["machine"], quick),
             "**Everything here is SIMULATED**: a discrete-event simulation in one process "
             "(bench/fleetsim.py). The decisions are the worker's policy code, with its backlog "
             "and its learning cost model and history; the devices are the simulator's roofline "
             "at catalog speed (time scale 1) with 5 % lognormal noise (the `-slowed7x` set: "
             "every device 7x slower and the rate 7x lower, as the scheduling benchmark ran "
             "them until 2026-12-05, so every roofline prior is optimistic alike); decisions take no time "
             "and models update at every completion — no Kafka, so these are placement-quality "
             "figures, not the pipeline's (that is the scheduling benchmark, whose sim sets run "
             "`fleet10` through Kafka). As in the pipeline, a policy picks a class and the worker "
             "sends the route to the class's device holding the least routed work "
             "(models/dispatch.py), each device its own FIFO. Two extra rows show switchyard's "
             "classes with another dispatch within them: *routes by key hash* (the pipeline's "
             "before models/dispatch.py: a device drawn by the workload id's hash) and *one "
             "queue per class* (the class's devices share one FIFO). `dmda-calibrated` is StarPU's dmda after an offline "
             "calibration run (10 runs of every shape on every class, before the trace); `dmda` "
             "calibrates during the trace, as the scheduling benchmark's does. The oracle is the "
             "earliest-finish rule with the true costs (greedy, not an optimum: JSQ beats it on "
             "some sets). `decide µs` is the measured CPU time of one decision in this process "
             "(on a shared machine).\n"]
    summary_rows = []
    for name, data in results["sets"].items():
        v = verdict(data)
        summary_rows.append([
            name, str(data["devices"]), fmt(data["rate_per_s"], ".0f"),
            fmt(data["policies"]["switchyard"]["completion_ms"]["mean"]),
            fmt(data["policies"]["oracle"]["completion_ms"]["mean"]),
            f"{v['best_baseline']} {fmt(data['policies'][v['best_baseline']]['completion_ms']['mean'])}",
            fmt(v["vs_oracle"], ".2f"), fmt(v["vs_best_baseline"], ".2f"),
            fmt(v["p99_vs_best_baseline"], ".2f"),
            fmt(data["policies"][HASHED]["completion_ms"]["mean"]),
            fmt(data["policies"][SHARED]["completion_ms"]["mean"])])
    parts.append(markdown_table(
        ["set", "devices", "rate/s", "switchyard mean ms", "oracle mean ms",
         "best baseline (mean ms)", "sy ÷ oracle (goal ≤ 1.15)",
         "sy ÷ best baseline (goal ≤ 0.9)", "sy p99 ÷ best p99 (goal ≤ 1)",
         "sy, by key hash, mean ms", "sy, one queue per class, mean ms"], summary_rows))
    for name, data in results["sets"].items():
        rows = []
        for policy, s in data["policies"].items():
            c = s["completion_ms"]
            shares = ", ".join(f"{k.removeprefix('sim-')} {100 * v:.0f}%"
                               for k, v in s["share"].items())
            rows.append([policy, fmt(c["mean"]), fmt(c["p95"]), fmt(c["p99"]),
                         f"{100 * (s['deadline_attainment'] or 0):.0f} %",
                         fmt(s["ratio_to_oracle"]["mean"], ".2f"), fmt(s["decide_us"], ".0f"),
                         shares])
        parts.append(f"\n### {name}\n\nFleet: "
                     + ", ".join(f"{n}x {c}" for c, n in data["fleet"].items())
                     + f"; precisions {', '.join(data['precisions'])}; "
                     f"{data['workloads']} workloads at {data['rate_per_s']:.0f}/s "
                     f"({100 * data['load_of_fp32_capacity']:.0f} % of the fp32 capacity, "
                     f"{data['fp32_capacity_per_s']:.0f}/s); static = {data['static_class']}. "
                     f"Measured {data['measured_at']}.\n")
        parts.append(markdown_table(["policy", "mean ms", "p95 ms", "p99 ms", "deadline met",
                                     "mean ÷ oracle", "decide µs", "share"], rows))
    parts.append("\n![fleet simulation](bench/out/fleetsim.png)")
    return "\n".join(parts) + "\n"


def plot(results: dict[str, Any], out_dir: Path) -> Path:
    plt = pyplot()
    names = list(results["sets"])
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(names)), 4.5))
    width = 0.8 / len(POLICIES)
    for k, policy in enumerate(POLICIES):
        values = [results["sets"][n]["policies"][policy]["ratio_to_oracle"]["mean"]
                  for n in names]
        ax.bar(np.arange(len(names)) + k * width, values, width, label=policy)
    ax.axhline(1.15, color="black", linestyle="--", linewidth=0.8, label="goal 1.15× oracle")
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("mean completion ÷ oracle (log)")
    ax.set_title("SIMULATED fleets at catalog speed (discrete-event, no Kafka)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    path = out_dir / "fleetsim.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(quick: bool, out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    count = QUICK_WORKLOADS if quick else FULL_WORKLOADS
    results: dict[str, Any] = {"machine": machine(), "quick": quick, "simulated": True,
                               "sets": {}}
    for sim_set in sim_sets(quick):
        results["sets"][sim_set.name] = run_set(sim_set, count)
        write_json(out_dir, "fleetsim", results)
    plot(results, out_dir)
    update_benchmarks_md("fleetsim", report(results, quick))
    return 0
