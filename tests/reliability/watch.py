"""Background observers and load for the reliability suite: each runs an asyncio coroutine in
its own thread while the (synchronous) test injects faults — a load that survives a broker
outage, a topic watcher that reads from the beginning, a resident-memory sampler.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from app.admin import ensure_topics
from app.producing import RenewingProducer
from app.records import outcome_rows
from app.settings import Settings


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
    the decider's duplicate suppression is exercised on every run. ``hold_at`` makes the load
    wait before that item until ``release`` is set: the test's fault then lands mid-trace
    however long it takes on this machine (the rest of the trace is sent after it).
    """

    def __init__(self, broker: str, topic: str, items: list[dict[str, Any]], rate: float,
                 duplicate_every: int = 0, hold_at: int | None = None) -> None:
        super().__init__()
        self.broker, self.topic, self.items, self.rate = broker, topic, items, rate
        self.duplicate_every = duplicate_every
        self.hold_at = hold_at
        self.release = threading.Event()
        self.sent = 0
        self.send_counts: Counter[str] = Counter()
        self.retries = 0

    async def _send(self, producer: RenewingProducer, workload: dict[str, Any]) -> None:
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
        # Idempotent, and replaced after a failed send, like the executors' (app/producing.py).
        producer = RenewingProducer(lambda: AIOKafkaProducer(
            bootstrap_servers=self.broker, acks="all", enable_idempotence=True,
            request_timeout_ms=10_000, retry_backoff_ms=250))
        await producer.start()
        try:
            started = time.monotonic()
            for i, workload in enumerate(self.items):
                if self.stop_event.is_set():
                    return
                if i == self.hold_at and not self.release.is_set():
                    while not (self.release.is_set() or self.stop_event.is_set()):
                        await asyncio.sleep(0.1)
                    started = time.monotonic() - i / self.rate  # go on at the same pace
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
    timestamp_s: float = 0.0  # the record's own timestamp (producer's wall clock), seconds

    def json(self) -> Any:
        """The value decoded as JSON (None when it is not)."""
        try:
            return json.loads(self.value) if self.value is not None else None
        except ValueError:
            return None


def per_outcome(topic: str, key: str | None,
                value: bytes | None) -> list[tuple[str | None, bytes | None]]:
    """A record as (key, value) pairs, one per workload: an outcomes batch (the outcomes
    topic's batch form, app.records.outcome_rows) becomes one pair per outcome, keyed by its
    workload id; any other record is itself."""
    if not topic.endswith("switchyard.outcomes") or not value:
        return [(key, value)]
    try:
        outcomes = outcome_rows(json.loads(value))
    except (ValueError, RecursionError):  # hostile input on the topic: nested past json's limit
        return [(key, value)]
    if len(outcomes) == 1:
        return [(key, value)]
    return [(str(o.get("id")) if isinstance(o, dict) else key, json.dumps(o).encode())
            for o in outcomes]


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
                            for k, v in per_outcome(r.topic, key, r.value):
                                self._records[r.topic].append(
                                    Record(r.topic, k, v, r.partition, r.offset, now,
                                           r.timestamp / 1000.0))
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
