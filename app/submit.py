"""``switchyard submit``: publish a JSONL trace of workloads; with --wait, collect every result.

Results are read from the end of switchyard.results as it was before the first workload was
sent, so only this run's answers are counted.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from app.admin import contract_topics, ensure_topics
from app.settings import Settings, get_settings

# The producer's linger: at a high rate, workloads sent within 5 ms share a request (one per
# workload cost the client and the broker each a request's work; Kafka 4's clients default to
# 5 ms as well). A workload's completion counts from before it waits there.
LINGER_MS = 5


def load_trace(path: Path, limit: int | None = None, id_prefix: str | None = None,
               ) -> list[dict[str, Any]]:
    """Read a JSONL trace; each line must be a JSON object with an ``id``."""
    workloads = []
    with path.open() as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                workload = json.loads(line)
            except ValueError as exc:
                raise SystemExit(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(workload, dict) or "id" not in workload:
                raise SystemExit(f"{path}:{number}: a workload is a JSON object with an id")
            if id_prefix:
                workload["id"] = f"{id_prefix}{workload['id']}"
            workloads.append(workload)
            if limit is not None and len(workloads) >= limit:
                break
    return workloads


@dataclass
class Summary:
    """What came back for one submission."""

    sent: int
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    sent_at_ms: dict[str, int] = field(default_factory=dict)
    # when each result was published (its Kafka timestamp), not when this client read it
    received_at_ms: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Counts, latency percentiles and the share of work per class."""
        statuses = Counter(r.get("status") for r in self.results.values())
        end_to_end = [self.received_at_ms[i] - self.sent_at_ms[i] for i in self.results
                      if i in self.sent_at_ms]
        execution = [float(r["latency_ms"]) for r in self.results.values()
                     if r.get("status") == "ok" and r.get("latency_ms") is not None]
        share = Counter(r.get("device_class") for r in self.results.values())
        errors = Counter(str(r.get("error"))[:80] for r in self.results.values()
                         if r.get("status") == "error")

        def pct(values: Sequence[float]) -> dict[str, float | None]:
            if not values:
                return {"p50": None, "p95": None, "p99": None, "mean": None}
            arr = np.asarray(values, dtype=float)
            return {"p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
                    "p99": float(np.percentile(arr, 99)), "mean": float(arr.mean())}

        return {
            "sent": self.sent, "results": len(self.results),
            "missing": self.sent - len(self.results),
            "ok": statuses.get("ok", 0), "error": statuses.get("error", 0),
            "end_to_end_ms": pct(end_to_end), "execution_ms": pct(execution),
            "share": {k: v / max(1, len(self.results)) for k, v in sorted(share.items())},
            "errors": dict(errors.most_common(5)),
        }


async def _results_consumer(settings: Settings) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.broker, enable_auto_commit=False,
                                group_id=None, **settings.kafka_client_kwargs())
    await consumer.start()
    results = settings.topic_names.results
    partitions = consumer.partitions_for_topic(results)
    if not partitions:
        await consumer._client.force_metadata_update()  # the topic may not exist yet
        partitions = consumer.partitions_for_topic(results) or {0}
    await assign_at_end(consumer, [TopicPartition(results, p) for p in sorted(partitions)])
    return consumer


async def assign_at_end(consumer: AIOKafkaConsumer, assignment: list[TopicPartition]) -> None:
    """Assign ``consumer`` the partitions and position it at their ends: it reads only what
    is produced from now on (results of workloads sent after this)."""
    consumer.assign(assignment)
    ends = await consumer.end_offsets(assignment)
    for tp in assignment:
        consumer.seek(tp, ends[tp])


async def submit(workloads: list[dict[str, Any]], rate: float | None, wait: bool,
                 timeout_s: float, settings: Settings | None = None,
                 progress: bool = True) -> Summary:
    """Publish ``workloads`` (at ``rate`` per second if given); with ``wait``, collect results."""
    settings = settings or get_settings()
    await ensure_topics(settings, contract_topics(settings))
    summary = Summary(sent=len(workloads))
    consumer = await _results_consumer(settings) if wait else None
    producer = AIOKafkaProducer(bootstrap_servers=settings.broker, acks="all", linger_ms=LINGER_MS,
                                enable_idempotence=True,
                                max_request_size=settings.max_message_bytes + 65536,
                                **settings.kafka_client_kwargs())
    await producer.start()
    wanted = {str(w["id"]) for w in workloads}
    shown = 0.0
    topic = settings.topic_names.workloads
    try:
        started = time.monotonic()
        for i, workload in enumerate(workloads):
            if rate:
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            sent_at = time.time_ns() // 1_000_000
            workload.setdefault("submitted_at_ms", sent_at)
            summary.sent_at_ms[str(workload["id"])] = sent_at
            await producer.send(topic, json.dumps(workload).encode(),
                                key=str(workload["id"]).encode())
            if progress and time.monotonic() - shown > 0.5:  # about twice a second
                shown = time.monotonic()
                _progress("sent", i + 1, len(workloads))
        await producer.flush()
        if progress:
            _progress("sent", len(workloads), len(workloads), end=True)
        if consumer is None:
            return summary
        deadline = time.monotonic() + timeout_s
        while len(summary.results) < len(wanted) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    key = record.key.decode() if record.key else None
                    if key in wanted and key not in summary.results and record.value:
                        summary.results[key] = json.loads(record.value)
                        # The record's own timestamp (set when the worker published it): the
                        # latency does not depend on when this client got round to reading.
                        summary.received_at_ms[key] = int(record.timestamp)
            if progress:
                _progress("results", len(summary.results), len(wanted))
        if progress:
            _progress("results", len(summary.results), len(wanted), end=True)
        return summary
    finally:
        await producer.stop()
        if consumer is not None:
            await consumer.stop()


def _progress(what: str, done: int, total: int, end: bool = False) -> None:
    width = 30
    filled = int(width * done / max(1, total))
    sys.stderr.write(f"\r{what:>8} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if end:
        sys.stderr.write("\n")
    sys.stderr.flush()


def print_summary(summary: dict[str, Any]) -> None:
    """A human-readable summary of a submission."""
    print(f"sent {summary['sent']}, results {summary['results']} "
          f"(ok {summary['ok']}, error {summary['error']}), missing {summary['missing']}")
    for name in ("end_to_end_ms", "execution_ms"):
        p = summary[name]
        if p["p50"] is not None:
            print(f"{name:>14}: p50 {p['p50']:.2f}  p95 {p['p95']:.2f}  p99 {p['p99']:.2f}  "
                  f"mean {p['mean']:.2f}")
    for device_class, share in summary["share"].items():
        print(f"  {device_class:<24} {100 * share:5.1f}%")
    for error, count in summary["errors"].items():
        print(f"  error x{count}: {error}")


def run_submit(trace: Path, rate: float | None, wait: bool, timeout_s: float,
               limit: int | None = None, id_prefix: str | None = None) -> int:
    """CLI entry point: returns 0 when everything sent (and, with --wait, answered ok)."""
    if not trace.exists():
        print(f"switchyard submit: no trace at {trace}", file=sys.stderr)
        return 2
    workloads = load_trace(trace, limit, id_prefix)
    summary = asyncio.run(submit(workloads, rate, wait, timeout_s))
    if not wait:
        print(f"sent {summary.sent} workloads to "
              f"{get_settings().topic_names.workloads}")
        return 0
    report = summary.as_dict()
    print_summary(report)
    return 0 if report["missing"] == 0 else 1
