"""Informative probes of idle classes (agents/probe.py), with the operator's consent.

With ``SWITCHYARD_IDLE_PROBING`` on, a class the traffic leaves idle is handed executions of
the traffic's shapes in the variants its cost model is least sure of. Each probe is a route
marked ``probe`` that its executor measures (a metric row, learned like any other) without an
outcome, so no probe ever becomes a result and every submitted workload still gets exactly
one.
"""

from __future__ import annotations

import asyncio

import pytest

from app.local import LocalCluster
from tests.integration.kafka_io import consume_until, produce

pytestmark = pytest.mark.kafka
WORKLOADS = 6
CLASSES = {"sim-h100", "sim-l4"}


def probe_rows(messages: list[dict]) -> list[dict]:
    return [m["value"] for m in messages
            if isinstance(m["value"], dict)
            and str(m["value"].get("workload_id", "")).startswith("probe-")]


def test_idle_classes_are_probed_and_no_probe_becomes_a_result(broker, tmp_path) -> None:
    cluster = LocalCluster.isolated(tmp_path, broker=broker)
    topic = f"{cluster.namespace}switchyard."
    with cluster:
        worker = cluster.start_worker(SWITCHYARD_IDLE_PROBING="1",
                                      SWITCHYARD_IDLE_PROBE_AFTER_S="0.5",
                                      SWITCHYARD_IDLE_PROBE_INTERVAL_S="0.5")
        executors = [cluster.start_executor("sim", device, threads=None,
                                            device_id=f"probe-test-{device}")
                     for device in ("h100", "l4")]
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        op = {"kind": "matmul", "m": 256, "k": 256, "n": 256, "dtype": "float32"}
        ids = [f"traffic-{i}" for i in range(WORKLOADS)]
        asyncio.run(produce(broker, f"{topic}workloads",
                            [(wid, {"id": wid, "op": op, "precisions": ["fp32", "bf16"]})
                             for wid in ids]))
        # Both classes are probed: the one the traffic skipped, and the one it used (in the
        # variants it did not use), once it has been idle for half a second.
        metrics = asyncio.run(consume_until(
            broker, f"{topic}metrics",
            lambda got: {r["device_class"] for r in probe_rows(got)} >= CLASSES,
            timeout_s=120))
        probes = probe_rows(metrics)
        assert {r["device_class"] for r in probes} >= CLASSES, probes
        assert all(r["status"] == "ok" and r["op"]["m"] == 256 for r in probes), probes
        probe_ids = {r["workload_id"] for r in probes}
        routes = [m for c in sorted(CLASSES) for m in asyncio.run(consume_until(
            broker, f"{topic}routes.{c}", lambda got: False, timeout_s=3))]
        probe_routes = {m["key"]: m["value"] for m in routes if m["key"] in probe_ids}
        assert set(probe_routes) == probe_ids
        assert all(r["probe"] is True and r["reason"] == "probe" for r in probe_routes.values())
        assert all(r["workload"]["id"] == r["id"] and "inputs" not in r["workload"]
                   for r in probe_routes.values())
        assert not any(m["value"].get("probe") for m in routes if m["key"] in ids)
        # Every submitted workload has exactly one result, and no probe has any.
        results = asyncio.run(consume_until(broker, f"{topic}results", lambda got: False,
                                            timeout_s=5))
        keys = [m["key"] for m in results]
        assert sorted(keys) == sorted(ids), keys
