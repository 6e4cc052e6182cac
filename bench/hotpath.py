"""The worker's capacity: decide, complete, learn and window together, in one worker process.

A fresh worker (pinned to one CPU where the machine has two) is handed a burst of workloads
produced faster than it takes them, so it always has work waiting. Its executors are
*instant*: a loop in this process answers each route with an outcome and a metric row
(outcome batches of up to 64 per workload partition and columnar version-3 metric records of
up to 64 rows, as executors publish) and executes nothing, so
the executions are SIMULATED and every CPU cycle the worker spends is the control plane's. The
instant devices' heartbeats (queue depth 0, their share of the route partitions) come from
this process too.

Measured: results per second (slope of results received, 10 % → 90 % of the burst), the worker
process's CPU µs per workload, and how much of it each stage spent (decide, complete, the
metric stage's steps) from the worker's own counters at /metrics; every result counted, and
any result seen twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from functools import lru_cache
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.local import LocalCluster
from app.records import HeartbeatRecord, metric_columns_bytes, outcome_batch_bytes
from app.settings import Settings
from app.submit import assign_at_end
from app.topics import class_partition, key_partition
from bench.harness import BROKER, stop_and_delete_topics, topic
from models.ops import parse_op
from models.traces import synthetic_trace

# The instant fleet: (sim catalog device, devices).
HOT_FLEET = (("h100", 2), ("l4", 2))
METRIC_ROWS = 64  # rows per metrics record, as an executor under load publishes
STAGE_LINES = ("switchyard_stage_cpu_seconds_total{", "switchyard_metric_stage_cpu_seconds_total{")


def instant_devices() -> list[dict[str, Any]]:
    """The instant devices as their heartbeats describe them (capabilities of the sim runtime
    of each catalog device), each with its share of its class's route partitions."""
    from runtimes import get_runtime

    partitions = Settings().route_partitions
    out = []
    for device, count in HOT_FLEET:
        runtime = get_runtime("sim", device)
        for i in range(count):
            out.append({"device_id": f"instant-{device}-{i}", "device_class": runtime.device_class,
                        "device": runtime.device, "index": i,
                        "capabilities": [list(c) for c in runtime.capabilities()],
                        "route_partitions": [p for p in range(partitions) if p % count == i]})
    return out


def stage_seconds(exposition: str) -> dict[str, float]:
    """CPU seconds per stage (decide, complete) and per metric-stage step, from /metrics."""
    out: dict[str, float] = {}
    for line in exposition.splitlines():
        if line.startswith(STAGE_LINES):
            label = "stage" if line.startswith(STAGE_LINES[0]) else "step"
            name = line.split(f'{label}="', 1)[1].split('"', 1)[0]
            out[name if label == "stage" else f"metric {name}"] = float(line.rsplit(" ", 1)[1])
    return out


def stage_counts(exposition: str) -> dict[str, float]:
    """Batches and records per stage (``decide batches``, ``decide records``, …) from
    /metrics."""
    out: dict[str, float] = {}
    for line in exposition.splitlines():
        for kind in ("batches", "records"):
            if line.startswith(f"switchyard_stage_{kind}_total{{"):
                name = line.split('stage="', 1)[1].split('"', 1)[0]
                out[f"{name} {kind}"] = float(line.rsplit(" ", 1)[1])
    return out


def mean_batches(before: str, after: str) -> dict[str, float | None]:
    """Each stage's mean batch size between two /metrics expositions."""
    first, last = stage_counts(before), stage_counts(after)
    out: dict[str, float | None] = {}
    for stage in ("decide", "complete"):
        batches = last.get(f"{stage} batches", 0.0) - first.get(f"{stage} batches", 0.0)
        records = last.get(f"{stage} records", 0.0) - first.get(f"{stage} records", 0.0)
        out[stage] = records / batches if batches else None
    return out


@lru_cache(maxsize=4096)
def _op_cost(op_json: str, precision: str) -> tuple[float, float]:
    spec = parse_op(json.loads(op_json))
    return float(spec.flops()), float(spec.bytes_moved(precision))


class InstantFleet:
    """Answers every route at once: an outcome per route, metric rows batched per class."""

    def __init__(self, namespace: str, devices: list[dict[str, Any]],
                 broker: str = BROKER, heartbeat_s: float = 1.0) -> None:
        self.namespace = namespace
        self.broker = broker
        self.heartbeat_s = heartbeat_s
        self.devices = devices
        self.by_partition = {(d["device_class"], p): d for d in devices
                             for p in d["route_partitions"]}
        self.classes = sorted({d["device_class"] for d in devices})
        self.rows: dict[str, list[bytes]] = defaultdict(list)
        settings = Settings()
        self.metric_partitions = settings.metric_partitions
        # Outcomes per outcomes partition, published as executors do (app/executor.py): a
        # partition's batch when full, every batch when the fetched routes are answered.
        self.outcomes: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
        self.outcome_partitions = settings.workload_partitions
        self.outcome_rows = settings.executor_outcome_batch_rows
        self.answered = 0
        self.started_ms = int(time.time() * 1000)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[list[asyncio.Task[None]]]:
        """The route topics created, heartbeats and answers going (the tasks) until the block
        ends."""
        await create_route_topics(self.route_topics(), self.broker)
        producer = AIOKafkaProducer(bootstrap_servers=self.broker, acks="all", linger_ms=2)
        await producer.start()
        tasks = [asyncio.create_task(self.heartbeats(producer)),
                 asyncio.create_task(self.serve(producer))]
        try:
            yield tasks
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await producer.stop()

    def route_topics(self) -> list[str]:
        return [topic(self.namespace, f"routes.{c}") for c in self.classes]

    async def heartbeats(self, producer: AIOKafkaProducer) -> None:
        """Every device's heartbeat every ``heartbeat_s``."""
        while True:
            for d in self.devices:
                record = HeartbeatRecord(
                    device_id=d["device_id"], device_class=d["device_class"], runtime="sim",
                    device=d["device"], capabilities=d["capabilities"], queue_depth=0,
                    sent_at_ms=int(time.time() * 1000), started_at_ms=self.started_ms,
                    model=d["device_class"].split("-", 2)[-1], simulated=True,
                    route_partitions=d["route_partitions"])
                await producer.send(
                    topic(self.namespace, "heartbeats"), record.dumps(),
                    key=d["device_id"].encode(),
                    partition=class_partition(d["device_class"], self.metric_partitions))
            await asyncio.sleep(self.heartbeat_s)

    async def serve(self, producer: AIOKafkaProducer) -> None:
        """Answer routes until cancelled."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.broker, group_id=None,
                                    enable_auto_commit=False, fetch_max_wait_ms=5)
        await consumer.start()
        try:
            await consumer._client.force_metadata_update()
            consumer.assign([TopicPartition(t, p) for t in self.route_topics()
                             for p in sorted(consumer.partitions_for_topic(t) or {0})])
            await consumer.seek_to_beginning()
            while True:
                batch = await consumer.getmany(timeout_ms=5, max_records=4000)
                for tp, messages in batch.items():
                    for message in messages:
                        await self.answer(producer, tp, message.value)
                await self.flush(producer)
        finally:
            await consumer.stop()

    async def answer(self, producer: AIOKafkaProducer, tp: TopicPartition, value: bytes) -> None:
        route = orjson.loads(value)
        device_class = route["device_class"]
        device = self.by_partition.get((device_class, tp.partition)) or next(
            d for d in self.devices if d["device_class"] == device_class)
        now = int(time.time() * 1000)
        exec_ms = max(0.001, float(route.get("predicted_ms") or 0.01))
        workload = route["workload"]
        outcome = {"id": route["id"], "status": "ok", "device_id": device["device_id"],
                   "device_class": device_class, "variant": route["variant"],
                   "latency_ms": exec_ms, "queue_ms": 0.0, "attempt": route.get("attempt", 1),
                   "simulated": True, "decided_at_ms": route.get("decided_at_ms"),
                   "finished_at_ms": now, "submitted_at_ms": workload.get("submitted_at_ms")}
        partition = key_partition(route["id"], self.outcome_partitions)
        self.outcomes[partition].append((route["id"], orjson.dumps(outcome)))
        if len(self.outcomes[partition]) >= self.outcome_rows:
            await self.send_outcomes(producer, partition)
        flops, moved = _op_cost(json.dumps(workload["op"], sort_keys=True),
                                route["variant"].get("precision", "fp32"))
        row = {"workload_id": route["id"], "device_id": device["device_id"],
               "device_class": device_class, "runtime": "sim", "op": workload["op"],
               "variant": route["variant"], "flops": flops, "bytes_moved": moved,
               "status": "ok", "queue_ms": 0.0, "exec_ms": exec_ms, "started_at_ms": now,
               "finished_at_ms": now, "predicted_ms": route.get("predicted_ms"),
               "attempt": route.get("attempt", 1), "simulated": True}
        self.rows[device_class].append(orjson.dumps(row))
        self.answered += 1
        if len(self.rows[device_class]) >= METRIC_ROWS:
            await self.flush(producer, device_class)

    async def send_outcomes(self, producer: AIOKafkaProducer, partition: int) -> None:
        held = self.outcomes.pop(partition, [])
        if held:
            await producer.send(topic(self.namespace, "outcomes"),
                                outcome_batch_bytes([v for _, v in held]),
                                key=held[0][0].encode(), partition=partition)

    async def flush(self, producer: AIOKafkaProducer, only: str | None = None) -> None:
        if only is None:
            for partition in list(self.outcomes):
                await self.send_outcomes(producer, partition)
        for device_class in [only] if only else list(self.rows):
            rows = self.rows.pop(device_class, [])
            if rows:
                await producer.send(
                    topic(self.namespace, "metrics"), metric_columns_bytes(rows),
                    key=device_class.encode(),
                    partition=class_partition(device_class, self.metric_partitions))


async def create_route_topics(names: Iterable[str], broker: str = BROKER) -> None:
    """Create the route topics ``names`` that do not exist yet, with the route partitions."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [NewTopic(t, Settings().route_partitions, 1) for t in names
                  if t not in existing]
        if wanted:
            await admin.create_topics(wanted)
    finally:
        await admin.close()


async def reader_at_end(topic_name: str, broker: str = BROKER,
                        wait_s: float = 60.0) -> AIOKafkaConsumer:
    """A started consumer of every partition of ``topic_name`` (waited for up to ``wait_s``:
    an executor creates its topics as it starts), positioned at their ends."""
    reader = AIOKafkaConsumer(bootstrap_servers=broker, group_id=None,
                              enable_auto_commit=False, fetch_max_wait_ms=20)
    await reader.start()
    deadline = time.monotonic() + wait_s
    while True:
        await reader._client.force_metadata_update()
        partitions = reader.partitions_for_topic(topic_name)
        if partitions or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    if not partitions:
        await reader.stop()
        raise RuntimeError(f"{topic_name} did not appear within {wait_s:.0f} s")
    await assign_at_end(reader, [TopicPartition(topic_name, p) for p in sorted(partitions)])
    return reader


async def send_then_collect(producer: AIOKafkaProducer, records: Iterable[tuple[str, bytes, bytes]],
                            reader: AIOKafkaConsumer, wanted: set[str], timeout_s: float,
                            answers_of: Callable[[Any], Iterable[tuple[str, Any]]],
                            ) -> dict[str, Any]:
    """Send ``records`` ((topic, key, value), produced lazily) as fast as the producer goes,
    then read ``reader`` until every id of ``wanted`` has answered or ``timeout_s`` has passed
    since the first send. ``answers_of(message)``: the (id, answer) pairs a message carries.
    Returns ``produced_s``, ``received`` (id -> seconds from the first send to its first
    answer), ``answers`` (id -> its first answer) and ``seen_twice``."""
    received: dict[str, float] = {}
    answers: dict[str, Any] = {}
    seen_twice = 0
    started = time.monotonic()
    for topic_name, record_key, value in records:
        await producer.send(topic_name, value, key=record_key)
    await producer.flush()
    produced_s = time.monotonic() - started
    deadline = started + timeout_s
    while len(received) < len(wanted) and time.monotonic() < deadline:
        batch = await reader.getmany(timeout_ms=200)
        now = time.monotonic() - started
        for messages in batch.values():
            for message in messages:
                for answered, answer in answers_of(message):
                    if answered not in wanted:
                        continue
                    if answered in received:
                        seen_twice += 1
                    else:
                        received[answered], answers[answered] = now, answer
    return {"produced_s": produced_s, "received": received, "answers": answers,
            "seen_twice": seen_twice}


def _result_keys(message: Any) -> list[tuple[str, None]]:
    return [(message.key.decode(), None)] if message.key and message.value else []


async def burst(namespace: str, workloads: list[dict[str, Any]], timeout_s: float,
                broker: str = BROKER) -> dict[str, Any]:
    """Produce ``workloads`` as fast as the producer goes; collect their results."""
    wanted = {str(w["id"]) for w in workloads}
    results = await reader_at_end(topic(namespace, "results"), broker)
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all", linger_ms=5)
    await producer.start()
    workloads_topic = topic(namespace, "workloads")
    try:
        run = await send_then_collect(
            producer, ((workloads_topic, str(w["id"]).encode(),
                        orjson.dumps({**w, "submitted_at_ms": int(time.time() * 1000)}))
                       for w in workloads),
            results, wanted, timeout_s, _result_keys)
        received, seen_twice = run["received"], run["seen_twice"]
        # Anything late that would show as a second result
        tail = await results.getmany(timeout_ms=2000)
        for messages in tail.values():
            seen_twice += sum(1 for m in messages
                              if m.key and m.key.decode() in received and m.value)
    finally:
        await producer.stop()
        await results.stop()
    times = sorted(received.values())
    return {"produced_s": run["produced_s"], "times": times, "results": len(received),
            "seen_twice": seen_twice}


def rate_between(times: list[float], total: int, low: float = 0.1, high: float = 0.9,
                 ) -> float | None:
    """Results per second between the ``low`` and ``high`` fractions of ``total``."""
    a, b = int(low * total), int(high * total) - 1
    if b >= len(times) or b <= a or times[b] <= times[a]:
        return None
    return (b - a) / (times[b] - times[a])


def _pin(pid: int, cpu: int) -> list[int] | None:
    import psutil

    if len(os.sched_getaffinity(0)) < 2:
        return None
    psutil.Process(pid).cpu_affinity([cpu])
    return [cpu]


def worker_capacity(count: int, workdir: Any) -> dict[str, Any]:
    """One worker's rate through every stage, for a burst of ``count`` workloads."""
    from bench.pipeline import cpu_seconds

    local = LocalCluster.isolated(workdir / uuid.uuid4().hex[:8], broker=BROKER)
    worker = local.start_worker()
    worker_cpus = _pin(worker.popen.pid, 1)
    own_cpus = _pin(os.getpid(), 0)
    fleet = InstantFleet(local.namespace, instant_devices())
    try:
        local.wait_ready(worker, 240)
        return asyncio.run(_measure(local, worker, fleet, count, worker_cpus, own_cpus,
                                    cpu_seconds))
    finally:
        stop_and_delete_topics(local)
        if own_cpus is not None:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))


async def guarded(work: Any, tasks: list[asyncio.Task[None]]) -> Any:
    """Await ``work``, failing at once with the error of an instant-fleet task that stopped
    (the worker would otherwise wait for devices whose heartbeats ended)."""
    job = asyncio.ensure_future(work)
    await asyncio.wait([job, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        if task.done():
            job.cancel()
            raise RuntimeError(f"the instant fleet stopped: {task.exception()!r}")
    return await job


async def _measure(local: LocalCluster, worker: Any, fleet: InstantFleet, count: int,
                   worker_cpus: list[int] | None, own_cpus: list[int] | None,
                   cpu_seconds: Any) -> dict[str, Any]:
    async with fleet.running() as tasks:
        await guarded(asyncio.to_thread(
            local.wait_devices, [d["device_id"] for d in fleet.devices], 120), tasks)
        # Warm-up: every class's route topic declared, models started, caches filled.
        warm = await guarded(burst(local.namespace,
                                   synthetic_trace(300, seed=1, id_prefix="warm-"), 120), tasks)
        pid = {"worker": [worker.popen.pid]}
        cpu_before = cpu_seconds(pid)["worker"]
        exposition_before = await asyncio.to_thread(local.api_text, "/metrics")
        stages_before = stage_seconds(exposition_before)
        run = await guarded(burst(local.namespace,
                                  synthetic_trace(count, seed=7, id_prefix="hot-"),
                                  max(120.0, count / 50.0)), tasks)
        # The metric stage trails the results by its batch window: let it finish.
        await asyncio.sleep(2.0)
        cpu_s = cpu_seconds(pid)["worker"] - cpu_before
        exposition_after = await asyncio.to_thread(local.api_text, "/metrics")
        stages_after = stage_seconds(exposition_after)
    stages = {name: 1e6 * (seconds - stages_before.get(name, 0.0)) / count
              for name, seconds in stages_after.items()}
    times = run["times"]
    return {"workloads": count, "results": run["results"], "seen_twice": run["seen_twice"],
            "warmup_results": warm["results"], "fleet": [f"{n}x sim:{d}" for d, n in HOT_FLEET],
            "worker_cpus": worker_cpus, "driver_cpus": own_cpus, "broker": BROKER,
            "produced_per_s": count / run["produced_s"] if run["produced_s"] else None,
            # Over the whole burst (the headline: the worker's sustained rate, first to last
            # result) and between 10 % and 90 % of it (the steady middle).
            "burst_rate_per_s": count / times[-1] if times and len(times) == count else None,
            "rate_per_s": rate_between(times, count),
            "all_done_s": times[-1] if times else None,
            # When 10 % and 90 % of the results were in: the burst's head and tail.
            "p10_done_s": times[len(times) // 10] if times else None,
            "p90_done_s": times[(9 * len(times)) // 10] if times else None,
            "worker_cpu_us_per_workload": 1e6 * cpu_s / count,
            "stage_cpu_us_per_workload": stages,
            "mean_batch": mean_batches(exposition_before, exposition_after)}


STAGE_ORDER = ("decide", "complete", "metric parse", "metric window", "metric learn",
               "metric tables")


def report_capacity(c: dict[str, Any]) -> str:
    """The worker-capacity paragraph and table of the pipeline section."""
    from bench.common import fmt, markdown_table

    stages = c.get("stage_cpu_us_per_workload", {})
    staged = sum(stages.get(s, 0.0) for s in STAGE_ORDER)
    total = c.get("worker_cpu_us_per_workload")
    pinned = (f"The worker ran on CPU {c['worker_cpus']} and this driver on CPU "
              f"{c['driver_cpus']} (the broker on either)" if c.get("worker_cpus")
              else "Nothing was pinned (fewer than two CPUs)")
    text = (
        f"**Worker capacity.** One worker, a burst of {c['workloads']} workloads (produced at "
        f"{fmt(c.get('produced_per_s'), '.0f')}/s, faster than the worker takes them) with "
        f"instant executors ({', '.join(c['fleet'])}: SIMULATED, nothing executes; a loop in "
        "the benchmark answers each route with an outcome and a metric row, as executors "
        "publish them: outcome batches of up to "
        f"{Settings().executor_outcome_batch_rows} per workload partition, columnar metric "
        f"records of up to {METRIC_ROWS} rows) after a warm-up of {c['warmup_results']}. Rate: the "
        "burst's workloads over the time from its first workload produced to its last result, "
        "and between 10 % and 90 % of the results (the steady middle). Worker CPU µs per "
        "workload: the whole process "
        "(Faust's consumer thread, producer and commits included); per stage: the stages' own "
        "counters at /metrics (decide and complete with what the event loop ran while they "
        "awaited the producer). "
        f"{pinned}. Results: {c['results']}/{c['workloads']}, "
        f"{c['seen_twice']} seen twice." +
        (f" Measured {c['measured_at']}." if c.get("measured_at") else ""))
    row = [fmt(c.get("burst_rate_per_s"), ".0f"), fmt(c.get("rate_per_s"), ".0f"),
           fmt(c.get("p10_done_s"), ".1f"), fmt(c.get("p90_done_s"), ".1f"),
           fmt(c.get("all_done_s"), ".1f"),
           *(fmt((c.get("mean_batch") or {}).get(s), ".1f") for s in ("decide", "complete")),
           fmt(total, ".0f"),
           *(fmt(stages.get(s), ".0f") for s in STAGE_ORDER),
           fmt(total - staged if total is not None else None, ".0f")]
    table = markdown_table(
        ["workloads/s (whole burst)", "10–90 % /s", "10 % in s", "90 % in s", "burst done s",
         "decide batch (mean)", "complete batch (mean, records)", "worker CPU µs/wl",
         *(f"{s} µs/wl" for s in STAGE_ORDER), "outside the stages µs/wl"], [row])
    return text + "\n\n" + table
