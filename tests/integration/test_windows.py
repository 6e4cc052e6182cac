"""Windowed tables on the real broker: metrics land in tumbling and hopping windows, and
windows that expired while the worker was down are deleted after it restarts
(faust-streaming issue 385: Faust's own expiry does not survive a restart with RocksDB)."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest

from app.local import LocalCluster
from app.records import metric_columns
from tests.integration.kafka_io import consume_until, produce

pytestmark = pytest.mark.kafka


def metric(device_class: str, i: int, exec_ms: float, status: str = "ok") -> dict:
    return {"workload_id": f"{device_class}-{i}", "device_id": f"{device_class}-0",
            "device_class": device_class, "runtime": "test",
            "op": {"kind": "softmax", "rows": 8, "dim": 8, "dtype": "float32"},
            "variant": {"precision": "fp32", "mode": "eager"}, "flops": 320.0,
            "bytes_moved": 512.0, "status": status, "queue_ms": 0.1, "exec_ms": exec_ms,
            "started_at_ms": 0, "finished_at_ms": 0}


def windows(cluster: LocalCluster, device_class: str) -> list[dict]:
    return [w for w in cluster.api("/api/windows")["windows"] if w["device_class"] == device_class]


def wait_for(predicate, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("condition not met in time")


def test_windows_aggregate_and_expired_windows_go_after_a_restart(broker, tmp_path):
    cluster = LocalCluster.isolated(
        tmp_path, broker=broker, SWITCHYARD_TUMBLING_WINDOW_S="2", SWITCHYARD_HOPPING_WINDOW_S="4",
        SWITCHYARD_HOPPING_STEP_S="2", SWITCHYARD_WINDOW_EXPIRES_S="6")
    data = tmp_path / "worker-data"
    topic = f"{cluster.namespace}switchyard.metrics"
    try:
        worker = cluster.start_worker(data_dir=data)
        cluster.wait_ready(worker)
        times = [1.0, 2.0, 3.0, 4.0, 100.0]
        records = [metric("old-cpu", i, t) for i, t in enumerate(times)]
        records.append(metric("old-cpu", 99, 5.0, status="error"))
        asyncio.run(produce(broker, topic, [(r["device_id"], r) for r in records]))
        found = wait_for(lambda: [w for w in windows(cluster, "old-cpu")
                                  if w["window"] == "tumbling" and w["count"] == 6])
        tumbling = found[0]
        assert tumbling["errors"] == 1
        assert tumbling["op_kind"] == "softmax"
        assert tumbling["mean_ms"] == pytest.approx(sum(times) / len(times))
        assert tumbling["p50_ms"] == pytest.approx(3.0, rel=0.03)
        assert tumbling["max_ms"] == pytest.approx(100.0)
        assert tumbling["p50_ms"] <= tumbling["p95_ms"] <= tumbling["p99_ms"] <= 100.0 * 1.02
        assert any(w["window"] == "hopping" for w in windows(cluster, "old-cpu"))

        cluster.kill(worker)  # a crash: Faust's in-memory expiry bookkeeping is lost
        time.sleep(10.0)  # the windows expire (6 s after their end) while it is down
        worker = cluster.start_worker(data_dir=data)
        cluster.wait_ready(worker)
        asyncio.run(produce(broker, topic, [("new-cpu-0", metric("new-cpu", 0, 1.0))]))
        wait_for(lambda: windows(cluster, "new-cpu"))
        assert wait_for(lambda: not windows(cluster, "old-cpu"), timeout_s=30) is True
    finally:
        cluster.stop()


def test_a_metric_batch_is_windowed_and_learned_row_by_row(broker, tmp_path):
    """The metrics topic's batch forms (docs/contract.md): every good row of a batch, row
    objects or columnar, is windowed and learned; a bad row is dead-lettered alone, with its
    own bytes; a batch of an unknown version is dead-lettered whole."""
    cluster = LocalCluster.isolated(tmp_path, broker=broker)
    ns = cluster.namespace
    rows = [metric("batch-cpu", i, float(i + 1)) for i in range(4)]
    rows[1]["exec_ms"] = "slow"
    columnar = [metric("columns-cpu", i, float(i + 1)) for i in range(5)]
    columnar[3]["exec_ms"] = -2.0
    columns = metric_columns(columnar)
    try:
        worker = cluster.start_worker()
        cluster.wait_ready(worker)
        asyncio.run(produce(broker, f"{ns}switchyard.metrics", [
            ("batch-cpu-0", {"version": 2, "metrics": rows}),
            ("batch-cpu-0", {"version": 9, "metrics": rows}),
            ("columns-cpu-0", columns)]))
        assert wait_for(lambda: sum(w["count"] for w in windows(cluster, "batch-cpu")
                                    if w["window"] == "tumbling") == 3)
        learned = wait_for(lambda: [m for m in cluster.api("/api/models")["models"]
                                    if m.get("device_class") == "batch-cpu"])
        assert learned[0]["samples"] == 3
        assert wait_for(lambda: sum(w["count"] for w in windows(cluster, "columns-cpu")
                                    if w["window"] == "tumbling") == 4)
        assert wait_for(lambda: [m for m in cluster.api("/api/models")["models"]
                                 if m.get("device_class") == "columns-cpu"
                                 and m.get("samples") == 4])
        dead = asyncio.run(consume_until(broker, f"{ns}switchyard.deadletter",
                                         lambda m: len(m) >= 3, timeout_s=30))
        by_reason = {d["value"]["reason"]: d["value"] for d in dead}
        [row_reason] = [r for r in by_reason if "metric 1 of a batch of 4" in r]
        assert "exec_ms" in row_reason and by_reason[row_reason]["stage"] == "learn"
        assert json.loads(base64.b64decode(by_reason[row_reason]["raw_b64"])) == rows[1]
        [column_reason] = [r for r in by_reason if "metric 3 of a batch of 5" in r]
        assert "exec_ms -2.0 is not a non-negative number" in column_reason
        assert json.loads(base64.b64decode(by_reason[column_reason]["raw_b64"])) == columnar[3]
        assert len(dead) == 3  # each refusal once
        [version_reason] = [r for r in by_reason if "version 9" in r]
        assert json.loads(base64.b64decode(by_reason[version_reason]["raw_b64"]))["version"] == 9
    finally:
        cluster.stop()
