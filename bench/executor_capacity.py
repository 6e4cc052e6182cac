"""One executor's capacity: routes in, outcomes and metrics out, nothing else running.

A simulated H100 executor (one process, pinned to one CPU where the machine has two) is handed
a burst of routes produced faster than it takes them — the decide stage's wire form, for the
synthetic trace's workloads — and this process reads its outcomes back. No worker runs: the
executor's whole cost per route is measured (fetch, decode, the simulated execution, outcome
and metric publishing, commits, heartbeats). The executions are SIMULATED at catalog speed: a
sim device sleeps its roofline time and spins the last 0.2 ms (runtimes/sim_rt.py), so the
CPU per route includes up to that much of "device" time; the mean simulated execution is
reported beside it.

Measured: routes per second (10 % → 90 % of the outcomes), the executor process's CPU µs per
route, outcomes missing or seen twice.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from app.local import LocalCluster
from app.records import RouteRecord, outcome_rows, wire_bytes
from bench.harness import BROKER, stop_and_delete_topics, topic
from models.traces import synthetic_trace

DEVICE = "h100"
CLASS = f"sim-{DEVICE}"


def route_bytes(workload: dict[str, Any]) -> bytes:
    """A route as the decide stage sends it: fp32, eager, no prediction to speak of."""
    return wire_bytes(RouteRecord, {
        "id": workload["id"], "workload": workload, "device_class": CLASS,
        "variant": {"precision": "fp32", "mode": "eager"}, "predicted_ms": 0.0,
        "predicted_std_ms": 0.0, "reason": "exploit", "model_version": 0,
        "decided_at_ms": int(time.time() * 1000)})


def _outcomes(message: Any) -> list[tuple[str, float]]:
    """(workload id, latency ms) of each outcome a record of the outcomes topic carries."""
    return [(str(o.get("id")), float(o.get("latency_ms") or 0.0))
            for o in outcome_rows(orjson.loads(message.value or b"null"))
            if isinstance(o, dict)]


async def send_and_collect(namespace: str, workloads: list[dict[str, Any]],
                           timeout_s: float) -> dict[str, Any]:
    """Produce one route per workload as fast as the producer goes; read their outcomes."""
    from bench.hotpath import reader_at_end, send_then_collect

    reader = await reader_at_end(topic(namespace, "outcomes"), BROKER)
    producer = AIOKafkaProducer(bootstrap_servers=BROKER, acks="all", linger_ms=5)
    await producer.start()
    route_topic = topic(namespace, f"routes.{CLASS}")
    try:
        run = await send_then_collect(
            producer, ((route_topic, str(w["id"]).encode(), route_bytes(w)) for w in workloads),
            reader, {str(w["id"]) for w in workloads}, timeout_s, _outcomes)
    finally:
        await producer.stop()
        await reader.stop()
    latency_ms = list(run["answers"].values())
    return {"produced_s": run["produced_s"], "times": sorted(run["received"].values()),
            "results": len(run["received"]), "seen_twice": run["seen_twice"],
            "mean_exec_us": 1000.0 * sum(latency_ms) / len(latency_ms) if latency_ms else None}


def executor_capacity(count: int, workdir: Path) -> dict[str, Any]:
    """One sim executor's rate and CPU per route, for a burst of ``count`` routes."""
    import psutil

    from bench.hotpath import _pin, create_route_topics, rate_between

    local = LocalCluster.isolated(workdir / uuid.uuid4().hex[:8], broker=BROKER)
    asyncio.run(create_route_topics([topic(local.namespace, f"routes.{CLASS}")]))
    executor = local.start_executor("sim", DEVICE, device_id=f"{CLASS}-capacity")
    executor_cpus = _pin(executor.popen.pid, 1)
    own_cpus = _pin(os.getpid(), 0)
    process = psutil.Process(executor.popen.pid)
    try:
        # Warm-up: the consumer group joined, the producer's connections open.
        warm = asyncio.run(send_and_collect(
            local.namespace, synthetic_trace(300, seed=1, id_prefix="warm-"), 120.0))
        if warm["results"] < 300:
            raise RuntimeError(f"the executor answered {warm['results']}/300 warm-up routes:\n"
                               f"{executor.log_tail()}")
        before = process.cpu_times()
        run = asyncio.run(send_and_collect(
            local.namespace, synthetic_trace(count, seed=7, id_prefix="cap-"),
            max(120.0, count / 50.0)))
        time.sleep(0.5)  # what the executor does after its last outcome: its commit
        after = process.cpu_times()
    finally:
        stop_and_delete_topics(local)
        if own_cpus is not None:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
    cpu_s = (after.user + after.system) - (before.user + before.system)
    times = run["times"]
    return {"routes": count, "results": run["results"], "seen_twice": run["seen_twice"],
            "warmup_results": warm["results"], "device": CLASS,
            "executor_cpus": executor_cpus, "driver_cpus": own_cpus, "broker": BROKER,
            "produced_per_s": count / run["produced_s"] if run["produced_s"] else None,
            "rate_per_s": rate_between(times, count),
            "all_done_s": times[-1] if times else None,
            "cpu_us_per_route": 1e6 * cpu_s / count,
            "mean_exec_us": run["mean_exec_us"]}


def report_executor_capacity(c: dict[str, Any]) -> str:
    """The executor-capacity paragraph and table of the pipeline section."""
    from bench.common import fmt, markdown_table

    pinned = (f"The executor ran on CPU {c['executor_cpus']} and this driver on CPU "
              f"{c['driver_cpus']} (the broker on either)" if c.get("executor_cpus")
              else "Nothing was pinned (fewer than two CPUs)")
    text = (
        f"**Executor capacity.** One `{c['device']}` executor (SIMULATED executions at catalog "
        f"speed) and no worker: a burst of {c['routes']} routes (the synthetic trace's "
        f"workloads in the decide stage's wire form, produced at "
        f"{fmt(c.get('produced_per_s'), '.0f')}/s) after a warm-up of {c['warmup_results']}; "
        "this process reads the outcomes back. CPU µs per route: the whole executor process "
        "(fetch, decode, the simulated execution — a sim device sleeps its time and spins the "
        "last 0.2 ms — outcomes, metrics, commits, heartbeats). "
        f"{pinned}. Outcomes: {c['results']}/{c['routes']}, {c['seen_twice']} seen twice."
        + (f" Measured {c['measured_at']}." if c.get("measured_at") else ""))
    row = [fmt(c.get("rate_per_s"), ".0f"), fmt(c.get("all_done_s"), ".1f"),
           fmt(c.get("cpu_us_per_route"), ".0f"), fmt(c.get("mean_exec_us"), ".0f")]
    table = markdown_table(["routes/s (10–90 %)", "burst done s", "executor CPU µs/route",
                            "mean simulated execution µs"], [row])
    return text + "\n\n" + table
