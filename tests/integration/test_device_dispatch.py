"""Dispatch within a class: each route goes to the device with the least routed work.

Two simulated H100 executors share their class's route topic (four partitions, two each, by
the consumer group). Each reports its partitions in its heartbeats; the worker sends every
route to a partition of the device holding the least routed, unfinished work
(models/dispatch.py). Twenty identical workloads on devices slowed so far that nothing finishes
are therefore split ten and ten — keyed by workload id alone, the split was whatever the ids
hashed to.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from app.local import LocalCluster
from tests.integration.kafka_io import consume_until, produce

pytestmark = pytest.mark.kafka
WORKLOADS = 20


def reported_partitions(cluster: LocalCluster) -> dict[str, list[int]]:
    return {d["device_id"]: d.get("route_partitions") or []
            for d in cluster.api("/api/devices")["devices"] if d.get("live")}


def test_identical_workloads_are_split_evenly_over_the_class_devices(broker, tmp_path) -> None:
    cluster = LocalCluster.isolated(tmp_path, broker=broker)
    with cluster:
        worker = cluster.start_worker()
        # Slowed 10^7 times: what is routed stays in flight (killed at the end, not waited for).
        executors = [cluster.start_executor("sim", "h100", threads=None, drift="0:10000000",
                                            device_id=f"slow-{i}") for i in range(2)]
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        deadline, owned = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            owned = reported_partitions(cluster)
            # Both report partitions, and no longer overlapping: a heartbeat sent before the
            # second executor's rebalance still lists every partition for the first one.
            if (len(owned) == 2 and all(owned.values())
                    and not set(owned["slow-0"]) & set(owned["slow-1"])):
                break
            time.sleep(0.5)
        assert len(owned) == 2 and all(owned.values()), owned
        assert not set(owned["slow-0"]) & set(owned["slow-1"])
        op = {"kind": "matmul", "m": 512, "k": 512, "n": 512, "dtype": "float32"}
        asyncio.run(produce(broker, f"{cluster.namespace}switchyard.workloads",
                            [(f"even-{i}", {"id": f"even-{i}", "op": op})
                             for i in range(WORKLOADS)]))
        routes = asyncio.run(consume_until(
            broker, f"{cluster.namespace}switchyard.routes.sim-h100",
            lambda got: len({m["key"] for m in got}) >= WORKLOADS, timeout_s=90))
        by_device = {device: sum(1 for m in routes if m["partition"] in parts)
                     for device, parts in owned.items()}
        assert sum(by_device.values()) == len(routes) >= WORKLOADS
        assert by_device == {"slow-0": WORKLOADS // 2, "slow-1": WORKLOADS // 2}, by_device
