"""The Kafka round trip's floor: the same four hops with nothing but aiokafka in between.

A workload's round trip crosses four topics in series: workload → worker, route → executor,
outcome → worker, result → client. Here a client produces to a first topic at a steady rate,
three relays each consume one topic and produce every record to the next (acks=all, no
linger, as Switchyard's producers), and the client reads the fourth: what the round trip costs
on this broker and machine with no decision, no tables and no Faust. Part of
``switchyard bench pipeline`` (decide part), beside the round trip it bounds.

Two forms: the relays as tasks of the client's own process (the floor of the Kafka hops
alone), and each relay in a process of its own (``processes=True``), as Switchyard's worker
and executors are: every hop then also wakes another process on the shared machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.common import summarize
from bench.harness import BROKER

HOPS = 4
READY = b"ready"
ROOT = Path(__file__).resolve().parent.parent  # the repository, for the relay processes


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


async def _relay_process(source: str, target: str) -> None:
    """One relay as a process's whole work: says READY on stdout once it reads its topic."""
    ready = asyncio.Event()
    relay = asyncio.create_task(_relay(source, target, ready))
    await ready.wait()
    sys.stdout.buffer.write(READY + b"\n")
    sys.stdout.flush()
    await relay


async def _start_relay_process(source: str, target: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.kafka_floor", BROKER, source, target, cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60.0)
    except TimeoutError:
        line = b""
    if line.strip() != READY:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"relay process {source} → {target} did not start "
                           f"(exit code {proc.returncode})")
    return proc


async def _measure(rate_per_s: float, count: int, partitions: int,
                   processes: bool = False) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    topics = [f"switchyard-floor-{tag}-{i}" for i in range(HOPS)]
    admin = AIOKafkaAdminClient(bootstrap_servers=BROKER)
    await admin.start()
    procs: list[asyncio.subprocess.Process] = []
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
        readies = [asyncio.Event() for _ in range(HOPS - 1)]
        relays: list[asyncio.Task[None]] = []
        if processes:
            for i in range(HOPS - 1):
                procs.append(await _start_relay_process(topics[i], topics[i + 1]))
                readies[i].set()
        else:
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
                "hops": HOPS, "relay_processes": processes, "round_trip_ms": summarize(trips)}
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()
        await admin.delete_topics(topics)
        await admin.close()


def kafka_floor(rate_per_s: float = 25.0, seconds: float = 30.0, partitions: int = 4,
                processes: bool = False) -> dict[str, Any]:
    """Round trip of ``rate_per_s`` records over four raw aiokafka hops (see the module); the
    relays in processes of their own with ``processes``."""
    return asyncio.run(_measure(rate_per_s, max(20, int(rate_per_s * seconds)), partitions,
                                processes))


if __name__ == "__main__":  # one relay: python -m bench.kafka_floor BROKER SOURCE TARGET
    BROKER = sys.argv[1]
    asyncio.run(_relay_process(sys.argv[2], sys.argv[3]))
