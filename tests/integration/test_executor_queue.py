"""Several runtimes served by one executor process (``--runtime numpy,torch``): one queue.

Three executors pinned to one core each keep a queue of their own and take turns on the core:
their executions stretch each other and their event loops compete with them. One process
hosting the runtimes runs their work one at a time in arrival order (one compute thread), and
names the queue in every heartbeat so the router counts the classes' work as one queue
(models/dispatch.py::queue_sharing). Checked here: both classes are live devices of one queue
group, round-robin work reaches both and comes back exactly once, no two executions overlap in
time, and SIGTERM stops both.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from app.local import LocalCluster
from tests.integration.kafka_io import consume_until, submit_and_collect

pytestmark = pytest.mark.kafka
WORKLOADS = 24


def test_one_process_runs_several_runtimes_as_one_queue(broker, tmp_path) -> None:
    cluster = LocalCluster.isolated(tmp_path, broker=broker, SWITCHYARD_POLICY="round_robin")
    with cluster:
        worker = cluster.start_worker()
        proc = cluster.start_executor("numpy,torch", "cpu", threads=1, device_id="one",
                                      extra_args=("--cpus", "0"))
        assert proc.devices == ("one-numpy", "one-torch")
        cluster.wait_ready(worker, 240)
        cluster.wait_devices(proc.devices, 120)
        devices = {d["device_id"]: d for d in cluster.api("/api/devices")["devices"]
                   if d.get("live")}
        groups = {devices[d].get("queue_group") for d in proc.devices}
        assert len(groups) == 1 and None not in groups, groups
        assert {devices[d]["device_class"] for d in proc.devices} == {
            devices["one-numpy"]["device_class"], devices["one-torch"]["device_class"]}

        op = {"kind": "matmul", "m": 192, "k": 192, "n": 192, "dtype": "float32"}
        ids = [f"queue-{i:02d}" for i in range(WORKLOADS)]
        results = submit_and_collect(broker, cluster.namespace, ids, op)
        assert sorted(m["key"] for m in results) == sorted(ids)  # each exactly once
        assert {m["value"]["device_id"] for m in results} == set(proc.devices)

        metrics = asyncio.run(consume_until(
            broker, f"{cluster.namespace}switchyard.metrics",
            lambda got: {m["value"]["workload_id"] for m in got} >= set(ids), timeout_s=60))
        # (A dynamic batch's executions share one span: one call.)
        spans = sorted({(m["value"]["started_at_ms"], m["value"]["finished_at_ms"],
                         m["value"]["device_id"]) for m in metrics
                        if m["value"]["workload_id"] in set(ids)})
        assert len({s[2] for s in spans}) == 2
        # One compute thread: each call starts once the one before it has finished (the
        # record's times are whole milliseconds).
        for before, after in zip(spans, spans[1:], strict=False):
            assert after[0] >= before[1], (before, after)

        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(60) == 0
        log = proc.log.read_text()
        for device in proc.devices:
            assert f"executor {device} stopped" in log, log[-3000:]


def test_several_runtimes_take_neither_instances_nor_drift() -> None:
    from app.cli import build_parser
    from app.executor_main import run_executor

    for bad in ({"instances": 2, "drift": None}, {"drift": "0:2"}):
        assert run_executor("numpy,torch", "cpu", threads=None, device_id=None,
                            slowdown_file=None, **bad) == 2
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["executor", "--runtime", "numpy,numpy"])
    with pytest.raises(SystemExit):
        parser.parse_args(["executor", "--runtime", "numpy,tensorflow"])
    assert parser.parse_args(["executor", "--runtime", "torch,jax,numpy"]).runtime == \
        "torch,jax,numpy"
