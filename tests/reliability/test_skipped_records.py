"""A record the consumer skips is not lost: the stages' offset guard reads it back (app/gaps.py).

Faust's consumer can move a partition's committed offset past a record it never delivered (a
workload produced while a second worker joined: seen in test_rebalance). Here the skip is made
deterministic: with the worker stopped, a workload is produced and the worker's committed offset
is moved past it, exactly the state Faust left behind. Without the guard the restarted worker
starts after it and the workload never gets a result.
"""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tests.reliability.harness import (
    alive_check,
    new_cluster,
    start_executors,
    topic_names,
    workloads,
)
from tests.reliability.watch import TopicWatcher

pytestmark = pytest.mark.kafka


async def _produce(broker: str, topic: str, records: list[dict], partition: int | None) -> list:
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
    await producer.start()
    try:
        return [await producer.send_and_wait(topic, json.dumps(r).encode(), key=r["id"].encode(),
                                              partition=partition) for r in records]
    finally:
        await producer.stop()


async def _commit(broker: str, group: str, tp: TopicPartition, offset: int) -> None:
    """Commit ``offset`` for ``tp`` on behalf of the (stopped) worker's consumer group."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: OffsetAndMetadata(offset, "")})
    finally:
        await consumer.stop()


def test_a_workload_skipped_by_the_consumer_still_gets_its_result(broker, workdir):
    cluster = new_cluster(workdir, broker)
    names = topic_names(cluster.namespace)
    with cluster:
        worker = cluster.start_worker()
        executors = start_executors(cluster, ["h100"])
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        watcher = TopicWatcher(broker, [names["results"]]).start()
        try:
            warmup = workloads(8, "warm-")
            sent = asyncio.run(_produce(broker, names["workloads"], warmup, None))
            watcher.wait(lambda: {w["id"] for w in warmup} <= set(
                watcher.key_counts(names["results"])), 120, "the warm-up results",
                alive_check(worker, *executors))
            partition = sent[-1].partition  # decide's ledger knows where this partition stands
            cluster.kill(worker, signal.SIGTERM)
            worker.popen.wait(60)

            skipped, after = workloads(2, "skip-", seed=7)
            meta = asyncio.run(_produce(broker, names["workloads"], [skipped, after], partition))
            tp = TopicPartition(names["workloads"], partition)
            # What Faust leaves behind: the committed offset past a record never processed.
            asyncio.run(_commit(broker, cluster.app_id, tp, meta[1].offset))

            restarted = cluster.start_worker()
            cluster.wait_ready(restarted, 240)
            watcher.wait(lambda: {skipped["id"], after["id"]} <= set(
                watcher.key_counts(names["results"])), 120,
                "results of the skipped workload and the one after it",
                alive_check(restarted, *executors))
            counts = watcher.key_counts(names["results"])
        finally:
            watcher.close()
        assert counts[skipped["id"]] == 1 and counts[after["id"]] == 1, counts
        log = restarted.log_tail(10**7)
        assert (f"the consumer skipped {names['workloads']}[{partition}] offsets "
                f"{meta[0].offset}..{meta[0].offset}") in log, log[-3000:]
