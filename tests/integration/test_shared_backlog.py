"""Two workers, one fleet: each waits on the whole queue of a class (issue 13, item 4).

Each worker holds only its own partitions' in-flight work; the executors serve both workers'
routes. Every worker publishes its per-class totals to the global ``backlog_shares`` table and
counts the others' in each class's wait (models/backlog.py, agents/state.py), so the wait a
decision expects behind a class is the same whichever worker makes it.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from app.local import LocalCluster, free_port
from models.traces import synthetic_trace
from tests.integration.kafka_io import produce

pytestmark = pytest.mark.kafka
WORKLOADS = 40


def views(cluster: LocalCluster, ports: list[int], device_class: str) -> list[dict]:
    out = []
    for port in ports:
        answer = cluster.api("/api/backlog", web_port=port)
        out.append({"worker": answer["worker"],
                    **answer["backlog"].get(device_class, {"ms": 0.0, "count": 0,
                                                           "others_ms": 0.0,
                                                           "others_count": 0})})
    return out


def test_two_workers_each_wait_on_the_whole_queue(broker, tmp_path) -> None:
    cluster = LocalCluster.isolated(tmp_path, broker=broker)
    port_b = free_port()
    with cluster:
        first = cluster.start_worker("worker-a")
        second = cluster.start_worker("worker-b", web_port=port_b,
                                      data_dir=tmp_path / "worker-b-data")
        # A simulated H100 slowed 10^7 times: what is routed to it stays in flight (its op in
        # hand takes minutes; it is killed at the end rather than waited for).
        slow = cluster.start_executor("sim", "h100", threads=None, drift="0:10000000")
        cluster.wait_ready(first, 240)
        cluster.wait_ready(second, 240, web_port=port_b)
        cluster.wait_devices([slow.name], 120)
        device_class = "sim-h100"
        trace = synthetic_trace(WORKLOADS, seed=5, id_prefix="shared-")
        asyncio.run(produce(broker, f"{cluster.namespace}switchyard.workloads",
                            [(w["id"], w) for w in trace]))
        ports = [cluster.web_port, port_b]
        deadline, last = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            a, b = views(cluster, ports, device_class)
            last = (a, b)
            held = a["count"] + b["count"]
            if (a["count"] > 0 and b["count"] > 0 and held >= WORKLOADS - 2
                    and a["others_count"] == b["count"] and b["others_count"] == a["count"]
                    and a["others_ms"] == pytest.approx(b["ms"])
                    and b["others_ms"] == pytest.approx(a["ms"])):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the workers never saw each other's share: {last}")
        cluster.kill(slow)
        assert a["worker"] != b["worker"]
        # Either worker's view of the class is the whole queue: its part plus the other's.
        assert a["count"] + a["others_count"] == b["count"] + b["others_count"] == held
