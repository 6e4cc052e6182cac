"""The reliability suite's harness: a cluster of real processes, a load that survives faults, a
watcher that reads topics in the background, a memory sampler, and the exactly-once ledger.

Everything here observes the system from outside, as a downstream consumer would: results are
counted on ``switchyard.results``, dead letters on ``switchyard.deadletter``, memory from the
worker's process. Waits are on conditions, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from app.admin import ensure_topics
from app.local import LocalCluster, Proc
from app.settings import Settings
from models.traces import synthetic_trace

FIGURES_ENV = "SWITCHYARD_RELIABILITY_FIGURES"
# Three missed 1 s heartbeats: short enough for a bounded test, long enough not to flap on a
# loaded 2-core machine.
DEVICE_TIMEOUT_S = "3"


@dataclass(frozen=True)
class Scale:
    """How big one form of a scenario is: CI's bounded form or the long mode's."""

    name: str
    workloads: int
    rate: float
    hostile: int
    soak_s: float
    soak_rate: float


BOUNDED = Scale("bounded", workloads=240, rate=30.0, hostile=1200, soak_s=40.0, soak_rate=15.0)
LONG = Scale("long", workloads=3000, rate=60.0, hostile=10000, soak_s=600.0, soak_rate=40.0)
# Both forms of a scenario, for ``parametrize("scale", SCALES)``: the bounded one runs in CI,
# the long one (marked slow) only in the long mode.
SCALES = [pytest.param(BOUNDED, id="bounded"),
          pytest.param(LONG, id="long", marks=pytest.mark.slow)]


def topic_names(namespace: str) -> dict[str, str]:
    """The contract topics of one namespace."""
    base = ("workloads", "results", "outcomes", "metrics", "heartbeats", "deadletter", "reroutes")
    return {name: f"{namespace}switchyard.{name}" for name in base}


def route_topic(namespace: str, device_class: str) -> str:
    """A device class's route topic in one namespace."""
    return f"{namespace}switchyard.routes.{device_class}"


# --- the cluster ---------------------------------------------------------------------------
def new_cluster(workdir: Path, broker: str, **env: str) -> LocalCluster:
    """An isolated cluster (own namespace and app id) with a short device timeout."""
    settings = {"SWITCHYARD_DEVICE_TIMEOUT_S": DEVICE_TIMEOUT_S, "SWITCHYARD_LOG_LEVEL": "info",
                **env}
    return LocalCluster.isolated(workdir, broker=broker, **settings)


def start_executors(cluster: LocalCluster, models: Iterable[str], **env: str) -> list[Proc]:
    """One sim executor per catalog model (``h100`` → class ``sim-h100``)."""
    return [cluster.start_executor("sim", model, device_id=f"sim-{model}-{i}", **env)
            for i, model in enumerate(models)]


def workloads(count: int, prefix: str, seed: int = 0) -> list[dict[str, Any]]:
    """A seeded synthetic trace with ids ``<prefix><n>``."""
    return synthetic_trace(count, seed=seed, id_prefix=prefix)


# --- background asyncio work -----------------------------------------------------------
class Background:
    """An asyncio coroutine in its own thread (the tests themselves are synchronous)."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> Background:
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            asyncio.run(self.run())
        except BaseException as exc:  # noqa: BLE001 - reported to the test by join()
            self.error = exc

    async def run(self) -> None:
        raise NotImplementedError

    def join(self, timeout_s: float) -> None:
        """Wait for the coroutine; re-raise its error in the test's thread."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"{type(self).__name__} still running after {timeout_s:.0f} s")
        if self.error is not None:
            raise self.error

    def close(self, timeout_s: float = 30.0) -> None:
        """Ask the coroutine to stop and wait for it."""
        self.stop_event.set()
        self.join(timeout_s)


class Load(Background):
    """Publishes workloads at a rate; a failed send is retried until the broker takes it.

    ``duplicate_every`` re-sends every n-th workload once more later (a client retrying), so
    the decider's duplicate suppression is exercised on every run.
    """

    def __init__(self, broker: str, topic: str, items: list[dict[str, Any]], rate: float,
                 duplicate_every: int = 0) -> None:
        super().__init__()
        self.broker, self.topic, self.items, self.rate = broker, topic, items, rate
        self.duplicate_every = duplicate_every
        self.sent = 0
        self.send_counts: Counter[str] = Counter()
        self.retries = 0

    async def _send(self, producer: AIOKafkaProducer, workload: dict[str, Any]) -> None:
        raw = json.dumps(workload).encode()
        while True:
            try:
                await producer.send_and_wait(self.topic, raw, key=workload["id"].encode())
                self.send_counts[workload["id"]] += 1
                return
            except KafkaError:
                self.retries += 1  # broker away: wait for it rather than lose the workload
                await asyncio.sleep(0.5)

    async def run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.broker, acks="all",
                                    request_timeout_ms=10_000, retry_backoff_ms=250)
        await producer.start()
        try:
            started = time.monotonic()
            for i, workload in enumerate(self.items):
                if self.stop_event.is_set():
                    return
                delay = started + i / self.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                workload.setdefault("submitted_at_ms", time.time_ns() // 1_000_000)
                await self._send(producer, workload)
                if self.duplicate_every and i >= 10 and i % self.duplicate_every == 0:
                    await self._send(producer, self.items[i - 10])
                self.sent = i + 1
        finally:
            await producer.stop()


@dataclass
class Record:
    """One record read by the watcher."""

    topic: str
    key: str | None
    value: bytes | None
    partition: int
    offset: int
    seen_at: float  # time.monotonic() when the watcher read it

    def json(self) -> Any:
        """The value decoded as JSON (None when it is not)."""
        try:
            return json.loads(self.value) if self.value is not None else None
        except ValueError:
            return None


class TopicWatcher(Background):
    """Reads topics from the beginning, continuously, into memory (thread-safe snapshots).

    The consumer has no group and reconnects by itself, so it keeps reading across a broker
    restart.
    """

    def __init__(self, broker: str, topics: Iterable[str]) -> None:
        super().__init__()
        self.broker, self.topics = broker, sorted(set(topics))
        self._records: dict[str, list[Record]] = {t: [] for t in self.topics}
        self._lock = threading.Lock()
        self.caught_up = threading.Event()

    async def run(self) -> None:
        # Route topics appear when a class is first chosen; create the ones not there yet with
        # the partition count the system would give them, so the watcher can start now.
        await ensure_topics(Settings(broker=self.broker), {t: 4 for t in self.topics})
        consumer = AIOKafkaConsumer(*self.topics, bootstrap_servers=self.broker, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    metadata_max_age_ms=2000, max_partition_fetch_bytes=16 << 20)
        await consumer.start()
        try:
            while not self.stop_event.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                if not batch:
                    self.caught_up.set()  # read everything there was when it started
                now = time.monotonic()
                with self._lock:
                    for records in batch.values():
                        for r in records:
                            key = r.key.decode("utf-8", "replace") if r.key else None
                            self._records[r.topic].append(
                                Record(r.topic, key, r.value, r.partition, r.offset, now))
        finally:
            await consumer.stop()

    def records(self, topic: str) -> list[Record]:
        """A snapshot of what has been read from ``topic``."""
        with self._lock:
            return list(self._records[topic])

    def key_counts(self, topic: str) -> Counter[str]:
        """How many records each key has on ``topic`` (so far)."""
        return Counter(r.key for r in self.records(topic) if r.key is not None)

    def wait(self, condition: Callable[[], bool], timeout_s: float, what: str,
             abort: Callable[[], str | None] | None = None) -> float:
        """Wait until ``condition()``; return the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.error is not None:
                raise self.error
            if condition():
                return time.monotonic() - started
            if abort is not None and (reason := abort()):
                raise AssertionError(f"while waiting for {what}: {reason}")
            time.sleep(0.2)
        raise TimeoutError(f"{what}: not reached after {timeout_s:.0f} s")


class RssSampler(Background):
    """Samples a process's resident memory every ``period_s`` (MiB, with timestamps)."""

    def __init__(self, pid: int, period_s: float = 1.0) -> None:
        super().__init__()
        self.pid, self.period_s = pid, period_s
        self.samples: list[tuple[float, float]] = []

    async def run(self) -> None:
        process = psutil.Process(self.pid)
        started = time.monotonic()
        while not self.stop_event.is_set():
            try:
                rss = process.memory_info().rss / 2**20
            except psutil.Error:
                return
            self.samples.append((time.monotonic() - started, rss))
            await asyncio.sleep(self.period_s)


def memory_trend(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Peak, first and last RSS and the slope (MiB/min) over the second half of the run.

    The first half is warm-up (imports, caches, RocksDB block cache filling); a leak shows as a
    positive slope that persists in the second half.
    """
    if len(samples) < 4:
        return {"samples": len(samples)}
    t = np.array([s[0] for s in samples])
    rss = np.array([s[1] for s in samples])
    half = len(samples) // 2
    slope = float(np.polyfit(t[half:], rss[half:], 1)[0]) * 60.0 if np.ptp(t[half:]) else 0.0
    return {"samples": len(samples), "first_mib": round(float(rss[0]), 1),
            "last_mib": round(float(rss[-1]), 1), "peak_mib": round(float(rss.max()), 1),
            "slope_second_half_mib_per_min": round(slope, 2)}


# --- the ledger ------------------------------------------------------------------------------
@dataclass
class Ledger:
    """Exactly-once accounting of one scenario, from the topics."""

    sent_ids: set[str]
    workload_sends: Counter[str]
    result_counts: Counter[str]
    outcome_counts: Counter[str] = field(default_factory=Counter)

    @property
    def lost(self) -> list[str]:
        return sorted(self.sent_ids - set(self.result_counts))

    @property
    def duplicated(self) -> dict[str, int]:
        return {k: n for k, n in self.result_counts.items() if n > 1 and k in self.sent_ids}

    def figures(self) -> dict[str, int]:
        """Sent, results, duplicates suppressed (extra deliveries that made no second result)
        and lost."""
        resent = sum(n - 1 for k, n in self.workload_sends.items() if n > 1)
        extra_outcomes = sum(n - 1 for k, n in self.outcome_counts.items()
                             if n > 1 and k in self.sent_ids)
        return {"workloads_sent": len(self.sent_ids), "workload_deliveries": resent
                + len(self.sent_ids),
                "results": sum(self.result_counts[k] for k in self.sent_ids),
                "duplicate_results": sum(n - 1 for n in self.duplicated.values()),
                "duplicates_suppressed": resent + extra_outcomes,
                "lost": len(self.lost)}


def ledger(load: Load, watcher: TopicWatcher, topics: dict[str, str]) -> Ledger:
    """The ledger of everything ``load`` sent, as the watcher saw the topics."""
    return Ledger(sent_ids=set(load.send_counts), workload_sends=load.send_counts,
                  result_counts=watcher.key_counts(topics["results"]),
                  outcome_counts=watcher.key_counts(topics["outcomes"]))


async def _group_lag(broker: str, group: str, topics: list[str]) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=None)
    await admin.start()
    await consumer.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
        partitions = [tp for tp in committed if tp.topic in topics]
        for topic in topics:
            for p in consumer.partitions_for_topic(topic) or ():
                tp = TopicPartition(topic, p)
                if tp not in committed:
                    partitions.append(tp)
        ends = await consumer.end_offsets(partitions) if partitions else {}
        return sum(max(0, end - (committed[tp].offset if tp in committed else 0))
                   for tp, end in ends.items())
    finally:
        await consumer.stop()
        await admin.close()


def group_lag(broker: str, group: str, topics: list[str]) -> int:
    """Records of ``topics`` that consumer group ``group`` has not committed yet."""
    try:
        return asyncio.run(_group_lag(broker, group, topics))
    except KafkaError:
        return -1  # unknown right now (a rebalance, a broker restart): not caught up


def wait_all_results(watcher: TopicWatcher, topics: dict[str, str], ids: set[str],
                     timeout_s: float, broker: str, app_id: str,
                     abort: Callable[[], str | None] | None = None) -> float:
    """Wait until every id has a result and the worker has committed every outcome: after
    that, a duplicate result would already be on the topic."""
    took = watcher.wait(lambda: ids <= set(watcher.key_counts(topics["results"])), timeout_s,
                        f"{len(ids)} results", abort)
    watcher.wait(lambda: group_lag(broker, app_id, [topics["outcomes"]]) == 0, 60,
                 "the worker committing every outcome", abort)
    return took


def assert_exactly_once(book: Ledger) -> None:
    """Every sent id has exactly one result."""
    assert not book.lost, f"{len(book.lost)} workloads lost: {book.lost[:10]}"
    assert not book.duplicated, f"duplicate results: {dict(list(book.duplicated.items())[:10])}"


def alive_check(*procs: Proc) -> Callable[[], str | None]:
    """An abort check: the reason one of ``procs`` is unusable (it exited), or None."""
    def check() -> str | None:
        for proc in procs:
            if not proc.alive():
                return f"{proc.name} exited:\n{proc.log_tail()}"
        return None
    return check


def model_samples(cluster: LocalCluster, web_port: int | None = None) -> dict[str, int]:
    """Samples learned per device class, from /api/models."""
    return {m["device_class"]: int(m["samples"])
            for m in cluster.api("/api/models", web_port)["models"]}


def crashed_agents(log_text: str) -> list[str]:
    """Lines of a worker log that say an agent or the worker crashed."""
    markers = ("Agent crashed", "crashed reason", "Traceback (most recent call last)")
    return [line for line in log_text.splitlines() if any(m in line for m in markers)]


# --- figures -------------------------------------------------------------------------------
def record_figures(scenario: str, scale: Scale, values: dict[str, Any]) -> None:
    """Print a scenario's figures and, when the long mode asks, add them to its JSON file."""
    print(f"\nRELIABILITY {scenario} [{scale.name}] {json.dumps(values, sort_keys=True)}")
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    target = Path(path)
    data = json.loads(target.read_text()) if target.exists() else {}
    data[f"{scenario}/{scale.name}"] = {"scenario": scenario, "scale": scale.name, **values}
    target.write_text(json.dumps(data, indent=1, sort_keys=True))
