"""Small real-Kafka helpers for integration tests: produce, consume until, create topics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.records import metric_rows, outcome_rows


async def create_topics(broker: str, names: Iterable[str], partitions: int = 1) -> None:
    """Create topics (existing ones are left alone)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(n, partitions, 1) for n in names if n not in existing]
        if new:
            await admin.create_topics(new)
    finally:
        await admin.close()


async def produce(broker: str, topic: str, records: Iterable[tuple[str | None, Any]],
                  partition: int | None = None) -> None:
    """Send (key, value) pairs; dict values are JSON-encoded, bytes are sent as they are."""
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
    await producer.start()
    try:
        for key, value in records:
            raw = value if isinstance(value, bytes) else json.dumps(value).encode()
            await producer.send(topic, raw, key=key.encode() if key is not None else None,
                                partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


async def consume_until(broker: str, topic: str, done: Callable[[list[dict[str, Any]]], bool],
                        timeout_s: float = 60.0, decode: bool = True,
                        abort: Callable[[], str | None] | None = None) -> list[dict[str, Any]]:
    """Read ``topic`` from the beginning until ``done(messages)`` or the timeout.

    Each message is ``{"key", "value", "partition", "offset", "timestamp_ms"}``; JSON values are decoded, and
    a metrics topic's batch record (app.records.metric_rows) comes back as one message per
    execution, an outcomes batch (app.records.outcome_rows) as one per outcome keyed by its
    workload id, as a downstream reader sees them. ``abort()`` returning a reason (e.g. a
    process under test died) ends the wait with an error.
    """
    expand = decode and topic.endswith("switchyard.metrics")
    outcomes = decode and topic.endswith("switchyard.outcomes")
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not done(messages):
            if abort is not None and (reason := abort()):
                raise AssertionError(reason)
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    value: Any = r.value
                    if decode and value is not None:
                        with contextlib.suppress(ValueError):
                            value = json.loads(value)
                    values = (metric_rows(value) if expand and isinstance(value, dict)
                              else outcome_rows(value) if outcomes else [value])
                    key = r.key.decode() if r.key else None
                    batched = outcomes and len(values) > 1
                    messages.extend({"key": v["id"] if batched else key, "value": v,
                                     "partition": r.partition, "offset": r.offset,
                                     "timestamp_ms": r.timestamp}
                                    for v in values)
    finally:
        await consumer.stop()
    return messages


def run(coro: Any) -> Any:
    """Run a coroutine from synchronous test code."""
    return asyncio.run(coro)


def submit_and_collect(broker: str, namespace: str, ids: Iterable[str], op: dict[str, Any],
                       timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Produce one workload of ``op`` per id to the namespace's workloads topic and read the
    results topic until every id has one; every result message read (duplicates too)."""
    wanted = list(ids)
    run(produce(broker, f"{namespace}switchyard.workloads",
                [(w, {"id": w, "op": op}) for w in wanted]))
    return run(consume_until(broker, f"{namespace}switchyard.results",
                             lambda got: {m["key"] for m in got} >= set(wanted),
                             timeout_s=timeout_s))
