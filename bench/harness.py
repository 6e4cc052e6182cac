"""Drive the real pipeline for a benchmark: a fresh local cluster (worker + executor processes
in their own topic namespace), a trace produced at Poisson arrival times, and every result
collected with the time it arrived — by a consumer that runs *while* the trace is produced,
so completion times are not inflated by collecting afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from app.demo import TOPIC_CLEANUP_TIMEOUT_S, delete_namespace_topics
from app.local import LocalCluster
from app.submit import assign_at_end

logger = logging.getLogger(__name__)
# The broker the benchmarks run against (SWITCHYARD_BROKER, as for every process): a fresh one
# is best, since a broker holding thousands of old test partitions is slower.
BROKER = os.environ.get("SWITCHYARD_BROKER", "127.0.0.1:9092")


@dataclass(frozen=True)
class ExecutorSpec:
    """``count`` executor processes of one runtime/device (sim devices: a catalog name)."""

    runtime: str
    device: str = "cpu"
    count: int = 1
    threads: int | None = 1
    drift: str | None = None
    slowdown_file: Path | None = None
    # More executor options (a link, a price, a power model: app/cli.py).
    args: tuple[str, ...] = ()
    # The cores its processes are pinned to (``--cpus``; None: the least busy, one per thread).
    cpus: str | None = None
    # Simulated devices served per process (``--instances``): a fleet of a hundred devices in
    # a few processes rather than a hundred.
    per_process: int = 1
    # Specs naming the same queue (count 1 each) are served by one process hosting their
    # runtimes (``--runtime torch,jax,numpy``): one compute thread, their work one at a time.
    queue: str | None = None

    def label(self) -> str:
        label = f"{self.count}x {self.runtime}:{self.device}"
        if self.queue:
            label += f" (queue {self.queue})"
        if self.per_process == 1:
            return label
        processes = len(self.processes())
        return f"{label} ({processes} process{'es' if processes > 1 else ''})"

    def processes(self) -> list[int]:
        """The devices each of its processes serves."""
        full, rest = divmod(self.count, self.per_process)
        return [self.per_process] * full + ([rest] if rest else [])


def topic(namespace: str, name: str) -> str:
    """A contract topic's name in ``namespace`` (the driver never imports app.topics, whose
    names are fixed at import from the environment)."""
    return f"{namespace}switchyard.{name}"


@dataclass
class Cluster:
    """A started cluster and the ids of its executors."""

    local: LocalCluster
    device_ids: list[str]
    startup_s: float

    @property
    def namespace(self) -> str:
        return self.local.namespace

    def stop(self) -> None:
        """Stop its processes and delete its topics (`stop_and_delete_topics`)."""
        stop_and_delete_topics(self.local)


def stop_and_delete_topics(local: LocalCluster) -> None:
    """Stop a local cluster's processes, then delete its topics (its namespace's and its app
    id's changelogs), so that every run of a benchmark starts on the same broker state rather
    than on every earlier run's partitions (a broker holding ~900 old topics once made an idle
    worker use 10x its CPU; on 2026-12-05 ~2,800 left by the worker-capacity and metric-path
    parts, which did not delete theirs, put the broker at 0.65 of a core where it had used
    0.45 at 1,000 workloads/s)."""
    local.stop()
    try:
        asyncio.run(asyncio.wait_for(delete_namespace_topics(
            BROKER, (local.namespace, local.app_id)), TOPIC_CLEANUP_TIMEOUT_S))
    except (TimeoutError, KafkaError, OSError) as exc:
        logger.warning("could not delete the topics of %s: %s", local.namespace, exc)


def start_cluster(workdir: Path, fleet: Sequence[ExecutorSpec], env: dict[str, str],
                  timeout_s: float = 240.0, worker_cpus: tuple[int, ...] | None = None) -> Cluster:
    """Start a worker (on ``worker_cpus`` only, if given) and the fleet in a fresh namespace;
    return once every device is live."""
    started = time.monotonic()
    local = LocalCluster.isolated(workdir / uuid.uuid4().hex[:8], broker=BROKER, **env)
    worker = local.start_worker(cpus=worker_cpus)
    ids = []
    queues: dict[str, list[ExecutorSpec]] = {}
    for spec in fleet:
        if spec.queue is not None:
            if spec.count != 1 or spec.per_process != 1:
                raise ValueError(f"{spec.label()}: a queue hosts one device per spec")
            queues.setdefault(spec.queue, []).append(spec)
    try:
        for name, specs in queues.items():
            first = specs[0]
            proc = local.start_executor(
                ",".join(s.runtime for s in specs), first.device, threads=first.threads,
                device_id=f"{name}-{first.device.replace(':', '')}",
                extra_args=first.args + (("--cpus", first.cpus) if first.cpus else ()))
            ids.extend(proc.devices)
        for spec in fleet:
            if spec.queue is not None:
                continue
            for i, instances in enumerate(spec.processes()):
                proc = local.start_executor(
                    spec.runtime, spec.device, threads=spec.threads,
                    device_id=f"{spec.runtime}-{spec.device.replace(':', '')}-{i}",
                    slowdown_file=spec.slowdown_file, drift=spec.drift,
                    extra_args=spec.args + (("--cpus", spec.cpus) if spec.cpus else ()),
                    instances=instances)
                ids.extend(proc.devices or (proc.name,))
        local.wait_ready(worker, timeout_s)
        local.wait_devices(ids, timeout_s)
    except BaseException:
        local.stop()
        raise
    return Cluster(local, ids, time.monotonic() - started)


@dataclass
class Run:
    """What came back from one driven trace. Times are wall-clock ms of this process
    (``sent``/``received``) or Kafka record timestamps (``*_ts``)."""

    sent: dict[str, float] = field(default_factory=dict)
    workload_ts: dict[str, int] = field(default_factory=dict)
    received: dict[str, float] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    result_ts: dict[str, int] = field(default_factory=dict)
    route_ts: dict[str, int] = field(default_factory=dict)
    route_class: dict[str, str] = field(default_factory=dict)
    # Result records beyond the first for a workload (the contract allows exactly one).
    duplicate_results: dict[str, int] = field(default_factory=dict)
    started_ms: float = 0.0
    last_sent_ms: float = 0.0

    def completion_ms(self, workload_id: str) -> float:
        """Produced → result received by this client."""
        return self.received[workload_id] - self.sent[workload_id]


def _now_ms() -> float:
    return time.time_ns() / 1e6


async def _tail_consumer(topics: Sequence[str]) -> AIOKafkaConsumer:
    """A group-less consumer assigned to every partition of ``topics``, at their ends."""
    consumer = AIOKafkaConsumer(bootstrap_servers=BROKER, enable_auto_commit=False,
                                group_id=None, fetch_max_wait_ms=20)
    await consumer.start()
    await consumer._client.force_metadata_update()
    await assign_at_end(consumer, [TopicPartition(t, p) for t in topics
                                   for p in sorted(consumer.partitions_for_topic(t) or {0})])
    return consumer


async def route_topics(namespace: str) -> list[str]:
    """The route topics that exist in ``namespace``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=BROKER)
    await admin.start()
    try:
        prefix = topic(namespace, "routes.")
        return sorted(t for t in await admin.list_topics() if t.startswith(prefix))
    finally:
        await admin.close()


async def drive(namespace: str, workloads: Sequence[dict[str, Any]], arrivals_s: Sequence[float],
                drain_s: float, watch_routes: bool = False,
                on_result: Callable[[str, dict[str, Any], float], None] | None = None,
                linger_ms: int = 0) -> Run:
    """Produce ``workloads[i]`` at ``arrivals_s[i]`` seconds from now; collect results until all
    arrived or ``drain_s`` after the last was sent. With ``watch_routes`` the Kafka timestamp of
    each route record is kept too (decision latency). ``linger_ms``: the producer's linger (0:
    each workload in a request of its own as soon as the previous one is acknowledged; the
    client, app/submit.py, lingers 5 ms). A workload's completion counts from before it is
    handed to the producer, so a linger is part of it."""
    run = Run()
    wanted = {str(w["id"]) for w in workloads}
    tails = [topic(namespace, "results")]
    if watch_routes:
        tails += await route_topics(namespace)
    consumer = await _tail_consumer(tails)
    results_topic = tails[0]
    producer = AIOKafkaProducer(bootstrap_servers=BROKER, acks="all", linger_ms=linger_ms)
    await producer.start()
    sending_done = asyncio.Event()

    async def collect() -> None:
        deadline = None
        while len(run.results) < len(wanted):
            if sending_done.is_set():
                deadline = deadline or time.monotonic() + drain_s
                if time.monotonic() > deadline:
                    return
            batch = await consumer.getmany(timeout_ms=100)
            now = _now_ms()
            for tp, records in batch.items():
                for record in records:
                    key = record.key.decode() if record.key else ""
                    if key not in wanted or not record.value:
                        continue
                    if tp.topic == results_topic:
                        if key not in run.results:
                            run.results[key] = json.loads(record.value)
                            run.received[key] = now
                            run.result_ts[key] = record.timestamp
                            if on_result is not None:
                                on_result(key, run.results[key], now)
                        else:
                            run.duplicate_results[key] = run.duplicate_results.get(key, 0) + 1
                    elif key not in run.route_ts:
                        run.route_ts[key] = record.timestamp
                        run.route_class[key] = tp.topic.rsplit(".", 1)[-1]

    collector = asyncio.create_task(collect())
    pending = []
    try:
        run.started_ms = _now_ms()
        start = time.monotonic()
        for workload, at in zip(workloads, arrivals_s, strict=True):
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = _now_ms()
            workload_id = str(workload["id"])
            body = {**workload, "submitted_at_ms": int(sent)}
            run.sent[workload_id] = sent
            future = await producer.send(topic(namespace, "workloads"),
                                         json.dumps(body).encode(), key=workload_id.encode())
            pending.append((workload_id, future))
        await producer.flush()
        run.last_sent_ms = _now_ms()
        for workload_id, future in pending:
            run.workload_ts[workload_id] = (await future).timestamp
        sending_done.set()
        await collector
    finally:
        collector.cancel()
        await producer.stop()
        await consumer.stop()
    return run


def run_trace(namespace: str, workloads: Sequence[dict[str, Any]], arrivals_s: Sequence[float],
              drain_s: float, **kwargs: Any) -> Run:
    """`drive` from synchronous code."""
    return asyncio.run(drive(namespace, workloads, arrivals_s, drain_s, **kwargs))
