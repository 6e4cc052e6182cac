"""Device sets, op mixes, true costs and capacity for the scheduling and drift benchmarks.

Capacity is the fluid bound: the largest Poisson arrival rate the fleet could sustain if every
op type were split across classes perfectly, knowing the true costs (a small linear program).
Benchmarks offer a fixed fraction of it (70 %) so that queueing, not idleness, decides.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bench.harness import ExecutorSpec
from models.ops import OpSpec, Variant, make_inputs, parse_op
from models.oracle import profile_key, simulated_ms
from models.traces import poisson_gaps, synthetic_trace

logger = logging.getLogger(__name__)

# As big as the contract's element limit allows (2^28 inputs + output per op; the learn stage
# parses metrics with that default), so that sim GPUs take milliseconds, not microseconds.
SIM_MIX: tuple[tuple[float, dict[str, Any]], ...] = (
    (3, {"kind": "matmul", "m": 8192, "k": 8192, "n": 8192}),
    (2, {"kind": "matmul", "m": 6144, "k": 16384, "n": 6144}),
    (2, {"kind": "bmm", "b": 16, "m": 2048, "k": 2048, "n": 2048}),
    (2, {"kind": "linear", "batch": 8192, "in_features": 8192, "out_features": 8192,
         "bias": True, "activation": "gelu"}),
    (1, {"kind": "conv2d", "batch": 64, "in_channels": 256, "out_channels": 256, "height": 64,
         "width": 64, "kernel": 3, "stride": 1, "padding": 1}),
    (2, {"kind": "attention", "batch": 16, "heads": 12, "seq_len": 2048, "head_dim": 128,
         "causal": True}),
    (2, {"kind": "layernorm", "rows": 65536, "dim": 1536}),
    (2, {"kind": "softmax", "rows": 65536, "dim": 1536}),
    (1, {"kind": "mlp", "batch": 8192, "dims": [4096, 8192, 4096], "activation": "relu"}),
)
# Tens of milliseconds on one CPU thread: 70 % of the capacity of one usable core stays within
# what a 2-core machine's pipeline can feed, and small ops (where NumPy's lower dispatch
# overhead wins) stay in.
LIVE_MIX: tuple[tuple[float, dict[str, Any]], ...] = (
    (2, {"kind": "matmul", "m": 64, "k": 64, "n": 64}),
    (2, {"kind": "matmul", "m": 512, "k": 512, "n": 512}),
    (2, {"kind": "matmul", "m": 1024, "k": 1024, "n": 1024}),
    (1, {"kind": "bmm", "b": 16, "m": 256, "k": 256, "n": 256}),
    (2, {"kind": "linear", "batch": 1024, "in_features": 1024, "out_features": 1024,
         "bias": True, "activation": "gelu"}),
    (1, {"kind": "conv2d", "batch": 8, "in_channels": 32, "out_channels": 64, "height": 64,
         "width": 64, "kernel": 3, "stride": 1, "padding": 1}),
    (1, {"kind": "attention", "batch": 4, "heads": 8, "seq_len": 512, "head_dim": 64,
         "causal": True}),
    (2, {"kind": "layernorm", "rows": 4096, "dim": 2048}),
    (2, {"kind": "softmax", "rows": 4096, "dim": 2048}),
    (1, {"kind": "mlp", "batch": 512, "dims": [1024, 2048, 1024], "activation": "relu"}),
)
# The drift benchmark's live scenario: lighter GEMM-shaped ops (its committed results used it).
DRIFT_LIVE_MIX: tuple[tuple[float, dict[str, Any]], ...] = (
    (3, {"kind": "matmul", "m": 32, "k": 32, "n": 32}),
    (2, {"kind": "matmul", "m": 256, "k": 256, "n": 256}),
    (2, {"kind": "matmul", "m": 512, "k": 512, "n": 512}),
    (1, {"kind": "bmm", "b": 16, "m": 128, "k": 128, "n": 128}),
    (2, {"kind": "linear", "batch": 256, "in_features": 512, "out_features": 512, "bias": True,
         "activation": "gelu"}),
    (1, {"kind": "mlp", "batch": 128, "dims": [512, 1024, 512], "activation": "relu"}),
)

# One process per simulated device: 10 processes is what a 2-core machine carries beside the
# worker and the broker (the "8 CPU cores" are 2 sim cpu-core instances here).
SIM_FLEET: tuple[ExecutorSpec, ...] = (
    ExecutorSpec("sim", "h100", 2, threads=None),
    ExecutorSpec("sim", "l4", 4, threads=None),
    ExecutorSpec("sim", "tpu-v5e", 2, threads=None),
    ExecutorSpec("sim", "cpu-core", 2, threads=None),
)

# 120 simulated devices in five classes: the fleet simulation's large fleet (bench/fleetsim.py)
# and, through Kafka, the scheduling benchmark's, served 20 to a process (``--instances``):
# seven executor processes rather than 120.
FLEET_120: dict[str, int] = {"h100": 12, "a100": 16, "l4": 40, "tpu-v5e": 16, "cpu-core": 36}
SIM_FLEET_120: tuple[ExecutorSpec, ...] = tuple(
    ExecutorSpec("sim", device, count, threads=None, per_process=20)
    for device, count in FLEET_120.items())


def live_cores() -> tuple[tuple[int, ...], str]:
    """Where a live set runs: (the worker's cores, the executors' core).

    The same for every policy of a run, so each policy meets the same contention: the three
    live executors share the last core this process may use (the capacity the scheduling
    benchmark offers a share of assumes one core for them, the rest for the worker and the
    broker), and the worker gets the others. Left to the least busy core at start, which two
    executors shared changed from one cluster to the next, and so did every policy's fleet.
    On a single core, everything shares it.
    """
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    return (allowed[:-1] or allowed), str(allowed[-1])


LIVE_FLEET: tuple[ExecutorSpec, ...] = tuple(
    ExecutorSpec(runtime, "cpu", 1, threads=1, cpus=core)
    for core in (live_cores()[1],) for runtime in ("torch", "jax", "numpy"))
# The same three runtimes served by one process on that core (``--runtime torch,jax,numpy``):
# one compute thread, their work one at a time in arrival order, one queue to the router.
LIVE_FLEET_ONE_QUEUE: tuple[ExecutorSpec, ...] = tuple(
    ExecutorSpec(spec.runtime, spec.device, 1, threads=1, cpus=spec.cpus, queue="live")
    for spec in LIVE_FLEET)
# End-to-end allowance for the Kafka hops (produce → decide → execute → result) on this
# machine, added to each workload's deadline: about the pipeline's p95 at moderate load.
DEADLINE_FLOOR_MS = 500.0
DEADLINE_SLACK = 4.0  # ... plus this many times the op's best true execution time


def fleet_classes(fleet: Sequence[ExecutorSpec]) -> dict[str, int]:
    """Device class → instance count (live CPU classes are ``<runtime>-cpu-<arch>``)."""
    from runtimes.base import device_class_name, machine_arch

    out: dict[str, int] = {}
    for spec in fleet:
        name = (f"sim-{spec.device}" if spec.runtime == "sim"
                else device_class_name(spec.runtime, "cpu", machine_arch()))
        out[name] = out.get(name, 0) + spec.count
    return out


def distinct_ops(mix: Sequence[tuple[float, dict[str, Any]]]) -> list[OpSpec]:
    """The mix's ops, parsed (float32 inputs)."""
    return [parse_op({**op, "dtype": "float32"}) for _, op in mix]


def sim_true_ms(classes: Sequence[str], ops: Sequence[OpSpec], precisions: Sequence[str],
                scale: float) -> dict[str, dict[str, float]]:
    """The simulator's true costs (roofline x the uniform ``scale`` the executors run at)."""
    table: dict[str, dict[str, float]] = {}
    for device_class in classes:
        entries = table.setdefault(device_class, {})
        for op in ops:
            for precision in precisions:
                variant = Variant(precision, "eager")
                ms = simulated_ms(device_class, op, variant)
                if ms is not None:
                    entries[profile_key(op, variant)] = ms * scale
    return table


def _profile_runtime(name: str, ops: Sequence[OpSpec], precisions: Sequence[str],
                     repeats: int, handling: bool = True, interleaved: bool = False,
                     held: bool = False,
                     ) -> tuple[str, dict[str, float]] | tuple[str, dict[str, float],
                                                                dict[str, float]]:
    """One runtime's column of the pre-profile, in a child process pinned to one core as the
    executors are (runtimes/affinity.py): (device class, {profile key: median ms}). With
    ``interleaved`` also a second column: ``repeats`` rounds in which every option runs once
    (each run follows the others, as in an executor serving a mix, not its own repeats).
    With ``held``, each entry is `held_ms` instead (``handling`` does not apply; the
    ``interleaved`` rounds still time the execution alone)."""
    from app.profile import profile_op
    from runtimes import VariantRefused, get_runtime
    from runtimes.affinity import isolate

    threads, _ = isolate(1, None)
    runtime = get_runtime(name, "cpu", threads=threads)
    entries: dict[str, float] = {}
    extras: dict[str, float] = {}
    options: list[tuple[OpSpec, Variant]] = []
    for op in ops:
        extra = handling_ms(runtime, op, repeats) if handling and not held else 0.0
        for kind, precision, mode in runtime.capabilities():
            if kind != op.kind or precision not in precisions:
                continue
            variant = Variant(precision, mode)
            try:
                ms = (held_ms(runtime, op, variant, repeats) if held
                      else float(profile_op(runtime, op, variant, repeats)["median_ms"]))
            except (VariantRefused, RuntimeError, MemoryError) as exc:
                logger.warning("profile %s %s %s: %s", name, op.kind, variant, exc)
                continue
            key = profile_key(op, variant)
            entries[key] = ms + extra
            extras[key] = extra
            options.append((op, variant))
    if not interleaved:
        return runtime.device_class, entries
    runs: dict[str, list[float]] = {profile_key(op, v): [] for op, v in options}
    for _ in range(max(1, repeats)):
        for op, variant in options:
            runs[profile_key(op, variant)].append(
                runtime.execute(op, variant, make_inputs(op, 0)).exec_ms)
    rounds = {key: float(np.median(times)) + extras[key] for key, times in runs.items()}
    return runtime.device_class, entries, rounds


def handling_ms(runtime: Any, op: OpSpec, repeats: int) -> float:
    """What an executor spends on a workload besides executing it: making its inputs from the
    seed and the checksum of its output (median ms). On this CPU it is 1-3x the execution of
    the live mix's large ops, so a profile of the execution alone overstated the executors'
    capacity and the oracle queued for seconds."""
    from runtimes import VariantRefused
    from runtimes.work import checksum

    times = []
    for seed in range(max(1, min(repeats, 3))):
        start = time.perf_counter()
        inputs = make_inputs(op, seed)
        made = time.perf_counter()
        try:
            output = runtime.execute(op, Variant("fp32", "eager"), inputs).output
        except (VariantRefused, RuntimeError, MemoryError):  # the inputs' cost alone
            output = None
        summed = time.perf_counter()
        if output is not None:
            checksum(output)
        times.append((made - start + time.perf_counter() - summed) * 1e3)
    return float(np.median(times))


def held_ms(runtime: Any, op: OpSpec, variant: Variant, repeats: int) -> float:
    """Median wall time of an executor's whole work on a route of ``op`` in ``variant``
    (`runtimes.work.perform`: its inputs made from the seed, the variant's conversions, the
    execution, the output's checksum), after one warm-up route: what the router's score
    weighs (execution and handling, models/handling.py), where ``profile_op`` times the
    execution alone. RuntimeError where the route fails."""
    from models.workload import WorkloadLimits
    from runtimes.work import perform

    limits = WorkloadLimits()
    times = []
    for seed in range(max(1, repeats) + 1):
        route = {"id": f"profile-{seed}", "variant": variant.to_dict(),
                 "workload": {"id": f"profile-{seed}", "op": op.to_dict(),
                              "precisions": [variant.precision], "seed": seed}}
        start = time.perf_counter()
        outcome = perform(route, runtime, device_id="profile", limits=limits).outcome
        elapsed = (time.perf_counter() - start) * 1e3
        if outcome["status"] != "ok":
            raise RuntimeError(str(outcome.get("error")))
        if seed:  # the first route warms the shape up
            times.append(elapsed)
    return float(np.median(times))


def live_profiles(runtimes: Sequence[str], ops: Sequence[OpSpec], precisions: Sequence[str],
                  repeats: int, handling: bool = True, interleaved: bool = False,
                  held: bool = False,
                  ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """An exhaustive pre-profile, one runtime at a time, each in a fresh process on one core
    with one thread (as its executor will run): the median time of every (op, variant) each
    runtime offers at the given precisions, with the executor's handling of a workload
    (``handling_ms``) unless ``handling`` is False (the execution alone: what executors report
    as ``latency_ms`` and the cost models learn), or with ``held`` each option's `held_ms`
    (what the scheduling benchmark's live oracle plans with). In this process, unpinned, JAX's
    fp32 ran on ~1.7 cores and the oracle planned with times no executor could meet. Also,
    with ``interleaved``, the same options' medians over rounds in which each runs once among the
    others (`_profile_runtime`; empty otherwise)."""
    table: dict[str, dict[str, float]] = {}
    rounds: dict[str, dict[str, float]] = {}
    request = json.dumps({"ops": [op.to_dict() for op in ops], "precisions": list(precisions),
                          "repeats": repeats, "handling": handling, "interleaved": interleaved,
                          "held": held})
    for name in runtimes:
        done = subprocess.run([sys.executable, "-m", "bench.fleets", name], input=request,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"profiling {name} failed: {done.stderr[-2000:]}")
        device_class, entries, *interleaved_entries = json.loads(
            done.stdout.strip().splitlines()[-1])
        table.setdefault(device_class, {}).update(entries)
        if interleaved_entries:
            rounds.setdefault(device_class, {}).update(interleaved_entries[0])
    return table, rounds


def best_ms(table: Mapping[str, Mapping[str, float]], op: OpSpec,
            precisions: Sequence[str]) -> dict[str, float]:
    """Per class, the fastest true time of ``op`` over the allowed precisions (any mode)."""
    prefix = op.signature() + "|"
    out = {}
    for device_class, entries in table.items():
        times = [ms for key, ms in entries.items()
                 if key.startswith(prefix) and key[len(prefix):].split("/")[0] in precisions]
        if times:
            out[device_class] = min(times)
    return out


def baseline_ms(table: Mapping[str, Mapping[str, float]], op: OpSpec,
                precisions: Sequence[str]) -> dict[str, float]:
    """Per class, the true time of what a class-level baseline (``static``) runs there: its
    fp32 eager variant where the class offers it (models/decision.py::class_representatives),
    else the fastest allowed variant (`best_ms`). The static class chosen by the fastest
    variant of each class was, where JAX's compiled variant tied torch, always-JAX running
    JAX's eager variant: 6.6-11.6 s against always-torch's ~0.1 on the live fp32 set."""
    key = profile_key(op, Variant("fp32", "eager"))
    return {c: float(table[c].get(key, ms)) for c, ms in best_ms(table, op, precisions).items()}


def fluid_capacity(weights: Sequence[float], times_ms: Sequence[Mapping[str, float]],
                   servers: Mapping[str, float]) -> float:
    """Max arrival rate (per s) with perfect fractional assignment: maximise λ subject to
    every op type's share being split over classes and no class busier than its servers."""
    from scipy.optimize import linprog

    classes = sorted(servers)
    probs = np.asarray(weights, dtype=float) / float(np.sum(weights))
    n_ops, n_cls = len(probs), len(classes)
    # Variables: x[o, c] (rate of op o on class c, per s), then λ. Maximise λ.
    cost = np.zeros(n_ops * n_cls + 1)
    cost[-1] = -1.0
    a_eq = np.zeros((n_ops, n_ops * n_cls + 1))
    for o in range(n_ops):
        a_eq[o, o * n_cls:(o + 1) * n_cls] = 1.0
        a_eq[o, -1] = -probs[o]
    a_ub = np.zeros((n_cls, n_ops * n_cls + 1))
    bounds = []
    for o in range(n_ops):
        for c, name in enumerate(classes):
            ms = times_ms[o].get(name)
            a_ub[c, o * n_cls + c] = (ms or 0.0) / 1e3
            bounds.append((0.0, 0.0 if ms is None else None))
    bounds.append((0.0, None))
    solved = linprog(cost, A_ub=a_ub, b_ub=[servers[c] for c in classes], A_eq=a_eq,
                     b_eq=np.zeros(n_ops), bounds=bounds, method="highs")
    if not solved.success:
        raise RuntimeError(f"capacity LP failed: {solved.message}")
    return float(solved.x[-1])


def build_trace(mix: Sequence[tuple[float, dict[str, Any]]], count: int, rate: float,
                precisions: Sequence[str], table: Mapping[str, Mapping[str, float]],
                seed: int, id_prefix: str) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Workloads with per-workload deadlines, and their Poisson arrival times (s)."""
    workloads = synthetic_trace(count, seed=seed, precisions=precisions, mix=mix,
                                id_prefix=id_prefix)
    for workload in workloads:
        op = parse_op(workload["op"])
        best = min(best_ms(table, op, workload["precisions"]).values(), default=0.0)
        workload["deadline_ms"] = round(DEADLINE_FLOOR_MS + DEADLINE_SLACK * best, 3)
    arrivals = np.cumsum(poisson_gaps(count, rate, seed))
    return workloads, arrivals


if __name__ == "__main__":  # one runtime's pre-profile, for live_profiles (JSON in and out)
    asked = json.loads(sys.stdin.read())
    print(json.dumps(_profile_runtime(sys.argv[1], [parse_op(o) for o in asked["ops"]],
                                      asked["precisions"], int(asked["repeats"]),
                                      bool(asked.get("handling", True)),
                                      bool(asked.get("interleaved", False)),
                                      bool(asked.get("held", False)))))
