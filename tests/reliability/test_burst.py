"""A burst larger than the worker's stream buffers: every workload gets one result, none stalls.

Faust hands each fetched record to its stream in fetch order, waiting while that stream's
buffer is full; the registry's heartbeats sit behind thousands of queued workloads. In a burst
the devices table fell behind the device timeout, every device looked dead, and the decider
held its stream until one came back — which, its full buffer blocking the heartbeats behind
it, none ever did: 7,387 of 20,000 workloads were routed and the worker waited for ever
(found with `switchyard bench pipeline`'s worker part). The same happens to a fresh deployment
whose work was queued before any executor started: the table is empty, not stale. While it
holds, the decider now reads the newest heartbeats straight from the topic every 2 s
(agents/registry.py::read_back). Without it the first test hung (> 200 s) and the second
failed at its 180 s limit; with it they pass in ~35 s each.

The executors are bench/hotpath.py's instant fleet (SIMULATED: nothing executes), so the
worker is the bottleneck; a 1.5 s device timeout (heartbeats every 0.25 s) makes the stall
certain.
"""

from __future__ import annotations

import asyncio

import pytest

from app.local import LocalCluster
from app.settings import Settings
from bench.hotpath import InstantFleet, burst, instant_devices
from models.traces import synthetic_trace
from tests.integration.kafka_io import consume_until, create_topics, produce

pytestmark = pytest.mark.kafka
# Past Faust's stream buffer (4,096 records) even with every workload partition's share.
BURST = 10_000


def fleet_of(cluster: LocalCluster, broker: str) -> InstantFleet:
    return InstantFleet(cluster.namespace, instant_devices(), broker=broker, heartbeat_s=0.25)


async def serve_burst(cluster: LocalCluster, broker: str) -> dict:
    fleet = fleet_of(cluster, broker)
    async with fleet.running():
        await asyncio.to_thread(cluster.wait_devices, [d["device_id"] for d in fleet.devices], 120)
        return await burst(cluster.namespace, synthetic_trace(BURST, seed=11, id_prefix="burst-"),
                           180.0, broker=broker)


def test_a_burst_past_the_stream_buffers_completes_once_each(broker, workdir) -> None:
    cluster = LocalCluster.isolated(workdir, broker=broker, SWITCHYARD_DEVICE_TIMEOUT_S="1.5")
    with cluster:
        worker = cluster.start_worker()
        cluster.wait_ready(worker, 240)
        run = asyncio.run(serve_burst(cluster, broker))
        assert run["results"] == BURST, f"{BURST - run['results']} workloads never completed"
        assert run["seen_twice"] == 0


async def serve_queued(cluster: LocalCluster, broker: str) -> list[dict]:
    """Start the instant fleet and read results until every queued workload has one."""
    async with fleet_of(cluster, broker).running():
        return await consume_until(broker, f"{cluster.namespace}switchyard.results",
                                   lambda got: len({m["key"] for m in got}) >= BURST,
                                   timeout_s=180, decode=False)


def test_work_queued_before_any_device_is_known_is_served_once_one_appears(broker,
                                                                           workdir) -> None:
    """A fresh deployment: the burst waits in the topic before the worker and every executor
    start, so the devices table is empty when the decider first holds, and the heartbeats that
    would fill it queue behind the workloads."""
    cluster = LocalCluster.isolated(workdir, broker=broker, SWITCHYARD_DEVICE_TIMEOUT_S="1.5")
    workloads = f"{cluster.namespace}switchyard.workloads"
    asyncio.run(create_topics(broker, [workloads], Settings().workload_partitions))
    asyncio.run(produce(broker, workloads, [
        (w["id"], w) for w in synthetic_trace(BURST, seed=12, id_prefix="queued-")]))
    with cluster:
        worker = cluster.start_worker()
        cluster.wait_ready(worker, 240)
        results = asyncio.run(serve_queued(cluster, broker))
        keys = [m["key"] for m in results if m["value"]]
        assert len(set(keys)) == BURST, f"{BURST - len(set(keys))} workloads never completed"
        assert len(keys) == BURST, "a workload has two results"
