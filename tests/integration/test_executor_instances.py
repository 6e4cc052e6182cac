"""Several simulated devices in one executor process (``--instances``).

A fleet of a hundred simulated devices cannot be a hundred processes on a small machine: one
process serves several, each its own device id, consumer (one member of the class's group, so
the route partitions are split between them) and producer. Every instance must be a device the
worker sees and routes to, every workload must come back exactly once, and SIGTERM must stop
every instance and the process cleanly.
"""

from __future__ import annotations

import signal
import time

import pytest

from app.local import LocalCluster
from tests.integration.kafka_io import submit_and_collect

pytestmark = pytest.mark.kafka
INSTANCES = 3
WORKLOADS = 30


def test_one_process_serves_several_simulated_devices(broker, tmp_path) -> None:
    cluster = LocalCluster.isolated(tmp_path, broker=broker, SWITCHYARD_ROUTE_PARTITIONS="6")
    with cluster:
        worker = cluster.start_worker()
        proc = cluster.start_executor("sim", "l4", threads=None, device_id="many",
                                      instances=INSTANCES)
        assert proc.devices == ("many-0", "many-1", "many-2")
        cluster.wait_ready(worker, 240)
        cluster.wait_devices(proc.devices, 120)
        deadline, owned = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            owned = {d["device_id"]: set(d.get("route_partitions") or [])
                     for d in cluster.api("/api/devices")["devices"] if d.get("live")}
            # Each instance is a member of the class's group: the six partitions split 2/2/2.
            if len(owned) == INSTANCES and sorted(map(len, owned.values())) == [2, 2, 2]:
                break
            time.sleep(0.5)
        assert set(owned) == set(proc.devices)
        assert sorted(map(len, owned.values())) == [2, 2, 2], owned
        assert set().union(*owned.values()) == set(range(6))

        op = {"kind": "matmul", "m": 256, "k": 256, "n": 256, "dtype": "float32"}
        ids = [f"inst-{i}" for i in range(WORKLOADS)]
        results = submit_and_collect(broker, cluster.namespace, ids, op)
        assert sorted(m["key"] for m in results) == sorted(ids)  # each exactly once
        ran_on = {m["value"]["device_id"] for m in results}
        assert ran_on <= set(proc.devices)
        assert len(ran_on) >= 2, ran_on  # the worker spread the work over the instances

        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(60) == 0
        log = proc.log.read_text()
        for device in proc.devices:
            assert f"executor {device} stopped" in log, log[-3000:]


def test_instances_are_refused_for_a_real_runtime(tmp_path) -> None:
    from app.executor_main import run_executor

    assert run_executor("numpy", "cpu", None, None, None, None, instances=2) == 2
    assert run_executor("sim", "h100", None, None, None, None, instances=0) == 2
