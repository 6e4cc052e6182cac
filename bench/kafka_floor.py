"""The Kafka round trip's floor: the same four hops with nothing but aiokafka in between.

A workload's round trip crosses four topics in series: workload → worker, route → executor,
outcome → worker, result → client. Here a client produces to a first topic at a steady rate,
three relays each consume one topic and produce every record to the next (acks=all, no
linger, as Switchyard's producers), and the client reads the fourth: what the round trip costs
on this broker and machine with no decision, no tables and no Faust. Part of
``switchyard bench pipeline`` (decide part), beside the round trip it bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.common import summarize
from bench.harness import BROKER

HOPS = 4


async def _relay(source: str, target: str, ready: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(source, bootstrap_servers=BROKER, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    producer = AIOKafkaProducer(bootstrap_servers=BROKER, acks="all", linger_ms=0)
    await consumer.start()
    await producer.start()
    try:
        # The topics are this run's own and new: reading from the earliest offset misses
        # nothing, whenever the partition's leader and position are settled.
        await consumer.getmany(timeout_ms=10)
        ready.set()
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for record in records:
                    await producer.send(target, record.value, key=record.key)
    finally:
        await consumer.stop()
        await producer.stop()


async def _measure(rate_per_s: float, count: int, partitions: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    topics = [f"switchyard-floor-{tag}-{i}" for i in range(HOPS)]
    admin = AIOKafkaAdminClient(bootstrap_servers=BROKER)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
        readies = [asyncio.Event() for _ in range(HOPS - 1)]
        relays = [asyncio.create_task(_relay(topics[i], topics[i + 1], readies[i]))
                  for i in range(HOPS - 1)]
        sink = AIOKafkaConsumer(topics[-1], bootstrap_servers=BROKER, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
        producer = AIOKafkaProducer(bootstrap_servers=BROKER, acks="all", linger_ms=0)
        await sink.start()
        await producer.start()
        await sink.getmany(timeout_ms=10)
        await asyncio.gather(*(r.wait() for r in readies))
        sent: dict[bytes, float] = {}
        trips: list[float] = []

        async def collect() -> None:
            while len(trips) < count:
                batch = await sink.getmany(timeout_ms=100)
                now = time.perf_counter()
                for records in batch.values():
                    trips.extend(1000.0 * (now - sent[r.key]) for r in records if r.key in sent)

        reader = asyncio.create_task(collect())
        gaps = np.random.default_rng(3).exponential(1.0 / rate_per_s, size=count)
        for i, gap in enumerate(gaps):
            await asyncio.sleep(float(gap))
            key = f"k{i}".encode()
            sent[key] = time.perf_counter()
            await producer.send(topics[0], b"x" * 300, key=key)
        with contextlib.suppress(TimeoutError):  # what arrived by then is reported
            await asyncio.wait_for(reader, timeout=30.0)
        for relay in relays:
            relay.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
        await sink.stop()
        await producer.stop()
        return {"rate_per_s": rate_per_s, "sent": count, "received": len(trips),
                "hops": HOPS, "round_trip_ms": summarize(trips)}
    finally:
        await admin.delete_topics(topics)
        await admin.close()


def kafka_floor(rate_per_s: float = 25.0, seconds: float = 30.0,
                partitions: int = 4) -> dict[str, Any]:
    """Round trip of ``rate_per_s`` records over four raw aiokafka hops (see the module)."""
    return asyncio.run(_measure(rate_per_s, max(20, int(rate_per_s * seconds)), partitions))
