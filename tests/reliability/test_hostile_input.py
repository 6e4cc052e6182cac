"""Hostile input on the live system: thousands of malformed and hostile messages on every input
topic (workloads, metrics, heartbeats, outcomes), with valid workloads interleaved.

No stage may crash (the worker stays up, /api/health says ok, no agent restarts), every
hostile message gets exactly one dead letter with a reason (matched by topic, partition and
offset), the worker's memory stays bounded, and every valid workload completes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from tests.reliability.fuzz_inputs import Hostile, hostile_messages
from tests.reliability.harness import (
    SCALES,
    Scale,
    Shared,
    alive_check,
    crashed_agents,
    read_topic,
    record_figures,
    topic_names,
    wait_all_results,
    workloads,
)
from tests.reliability.watch import RssSampler, TopicWatcher, memory_trend

pytestmark = pytest.mark.kafka
VALID_EVERY = 10  # one valid workload after every ten hostile messages
RSS_GROWTH_LIMIT_MIB = 300.0  # hostile values stay under 1 MiB each; growth beyond this is a leak


def _where(letter: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Where a dead letter's original message was: (topic, partition, offset)."""
    return letter.get("topic"), letter.get("partition"), letter.get("offset")


async def _send_all(broker: str, names: dict[str, str], hostile: list[Hostile],
                    valid: list[dict[str, Any]]) -> dict[tuple[str, int, int], Hostile]:
    """Send hostile and valid messages interleaved; where each hostile one landed."""
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all", linger_ms=5,
                                max_request_size=1 << 20)
    await producer.start()
    landed: dict[tuple[str, int, int], Hostile] = {}
    try:
        pending = []
        valid_iter = iter(valid)
        for i, message in enumerate(hostile):
            future = await producer.send(names[message.topic], message.value,
                                         key=message.key.encode())
            pending.append((message, future))
            if i % VALID_EVERY == VALID_EVERY - 1 and (workload := next(valid_iter, None)):
                workload["submitted_at_ms"] = time.time_ns() // 1_000_000
                await producer.send(names["workloads"], json.dumps(workload).encode(),
                                    key=workload["id"].encode())
        for message, future in pending:
            meta = await future
            landed[(meta.topic, meta.partition, meta.offset)] = message
    finally:
        await producer.stop()
    return landed


@pytest.mark.parametrize("scale", SCALES)
def test_hostile_input_is_dead_lettered_and_valid_work_completes(broker, shared: Shared,
                                                                 scale: Scale):
    """Every hostile message is dead-lettered once with a reason; nothing crashes."""
    cluster, worker = shared.cluster, shared.worker
    names = topic_names(cluster.namespace)
    hostile = hostile_messages(scale.hostile, seed=7 if scale.name == "bounded" else 11)
    valid = workloads(len(hostile) // VALID_EVERY, f"valid-{scale.name}-", seed=3)
    log_start = len(worker.log_tail(10**9))
    watcher = TopicWatcher(broker, [names["deadletter"], names["results"]]).start()
    sampler = RssSampler(worker.popen.pid, period_s=0.5).start()
    try:
        time.sleep(1.5)  # a few memory samples before the first hostile message
        started = time.monotonic()
        landed = asyncio.run(_send_all(broker, names, hostile, valid))

        def dead_lettered() -> dict[tuple[str, int, int], dict[str, Any]]:
            out = {}
            for record in watcher.records(names["deadletter"]):
                letter = record.json() or {}
                out[_where(letter)] = letter
            return out

        watcher.wait(lambda: set(landed) <= set(dead_lettered()), 600,
                     f"{len(landed)} dead letters", alive_check(worker, *shared.executors))
        valid_ids = {w["id"] for w in valid}
        wait_all_results(watcher, names, valid_ids, 300, broker, cluster.app_id,
                         alive_check(worker))
        took_s = time.monotonic() - started
        results = Counter(key for key, value in read_topic(broker, names["results"])
                          if key in valid_ids and value is not None
                          and json.loads(value).get("status") == "ok")
        health = cluster.api("/api/health")
    finally:
        sampler.close()
        watcher.close()
    letters = dead_lettered()
    per_message = Counter(_where(r.json() or {}) for r in watcher.records(names["deadletter"]))
    twice = {k: n for k, n in per_message.items() if k in landed and n > 1}
    no_reason = [k for k in landed if not str(letters[k].get("reason", "")).strip()]
    trend = memory_trend(sampler.samples)
    baseline = min(rss for t, rss in sampler.samples if t < 1.5)
    growth = max(rss for _, rss in sampler.samples) - baseline
    by_topic = Counter(m.topic for m in hostile)
    record_figures("hostile_input", scale, {
        "hostile_sent": len(landed), "dead_lettered": sum(1 for k in landed if k in letters),
        "by_topic": dict(by_topic), "categories": len({m.category for m in hostile}),
        "valid_sent": len(valid), "valid_completed": len(valid_ids), "seconds": round(took_s, 1),
        "worker_rss_growth_mib": round(growth, 1), "worker_rss": trend,
    })
    assert health["status"] == "ok" and worker.alive()
    wrong = {i: results[i] for i in valid_ids if results[i] != 1}
    assert not wrong, f"valid workloads without exactly one ok result: {list(wrong.items())[:5]}"
    assert not crashed_agents(worker.log_tail(10**9)[log_start:])
    assert not twice, f"dead-lettered more than once: {list(twice)[:5]}"
    assert not no_reason, f"dead letters without a reason: {no_reason[:5]}"
    assert growth < RSS_GROWTH_LIMIT_MIB, f"worker RSS grew {growth:.0f} MiB"
