"""A remote class on the real broker (issue 14): a sim H100 executor behind a slow declared
link and a price. Its heartbeats carry the link and the price (and the dashboard shows them),
every metric row measures the transfer of the workload's bytes separately from the execution,
the worker learns the class's transfer from those rows, routes say what the transfer and cost
were predicted to be, and bad input — a heartbeat with a negative bandwidth, a request with an
unknown objective, a malformed deadline, a negative or unaffordable cost ceiling — is
dead-lettered with its reason. Every message read back validates against its JSON Schema."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.local import LocalCluster
from tests.integration.kafka_io import consume_until, produce

pytestmark = pytest.mark.kafka
SCHEMAS = Path(__file__).resolve().parents[2] / "app" / "schemas"
CLASS = "sim-h100"
RTT_MS, MBIT_S, PRICE = 40.0, 10.0, 4.0  # 1,250 bytes per ms
OP = {"kind": "matmul", "m": 64, "k": 64, "n": 64}
BYTES = (2 * 64 * 64 + 64 * 64) * 4  # the inputs up, the output down, float32
EXPECTED_MS = RTT_MS + BYTES / 1250.0  # 79.3 ms
COUNT = 8
BAD = {
    "bad-objective": {"id": "bad-objective", "op": OP, "objective": "speed"},
    "bad-deadline": {"id": "bad-deadline", "op": OP, "deadline_ms": "soon"},
    "bad-ceiling": {"id": "bad-ceiling", "op": OP, "max_cost": -1},
    "over-budget": {"id": "over-budget", "op": OP, "max_cost": 0},
}


def validator(topic: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / f"{topic}.schema.json")
                                                      .read_text()))


def wait_until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.isolated(tmp_path_factory.mktemp("remote"), broker=broker)
    try:
        worker = local.start_worker()
        executor = local.start_executor(
            "sim", "h100", threads=None, device_id="remote-h100",
            extra_args=("--link-rtt-ms", str(RTT_MS), "--link-bandwidth-mbit-s", str(MBIT_S),
                        "--price-per-hour", str(PRICE)))
        local.wait_ready(worker, timeout_s=180)
        local.wait_devices([executor.name], timeout_s=120)
        ns = local.namespace
        workloads = [{"id": f"r-{i}", "op": OP, "seed": i, "objective": "latency",
                      "deadline_ms": 5000} for i in range(COUNT)]
        beat = {"device_id": "liar", "device_class": CLASS, "runtime": "sim", "device": "h100",
                "capabilities": [["matmul", "fp32", "eager"]], "queue_depth": 0,
                "sent_at_ms": 1, "started_at_ms": 1,
                "link": {"rtt_ms": 5, "bandwidth_mbit_s": -100}}
        asyncio.run(produce(broker, f"{ns}switchyard.workloads",
                            [(w["id"], w) for w in workloads] + list(BAD.items())))
        asyncio.run(produce(broker, f"{ns}switchyard.heartbeats", [("liar", beat)],
                            partition=zlib.crc32(CLASS.encode()) % 4))

        def settled() -> bool:
            totals = local.api("/api/dashboard")["totals"]
            return (totals["results"].get("ok", 0) >= COUNT
                    and totals["deadletters"] >= len(BAD) + 1)
        wait_until(settled, 120, "every result and the dead letters")
        yield local
    finally:
        local.stop()


def read(cluster: LocalCluster, topic: str, count: int) -> list[dict[str, Any]]:
    return asyncio.run(consume_until(cluster.broker, f"{cluster.namespace}switchyard.{topic}",
                                     lambda m: len(m) >= count, timeout_s=30))


def test_every_metric_measures_the_transfer_apart_from_the_execution(
        cluster: LocalCluster) -> None:
    rows = [m["value"] for m in read(cluster, "metrics", COUNT)]
    metric = validator("metrics")
    assert len(rows) >= COUNT
    for row in rows:
        assert metric.is_valid(row), row
        assert row["device_class"] == CLASS and row["simulated"] and row["link_simulated"]
        assert row["transfer_bytes"] == BYTES
        # Really waited (sleep overshoots a little, never undershoots much).
        assert EXPECTED_MS - 1.0 <= row["transfer_ms"] <= EXPECTED_MS + 30.0, row
        assert row["exec_ms"] < 5.0  # a 64³ matmul on a simulated H100: microseconds
        assert row["energy_simulated"] and row["energy_j"] > 0
    results = [m["value"] for m in read(cluster, "results", COUNT)]
    assert all(validator("results").is_valid(r) for r in results)
    assert all(r["transfer_ms"] >= EXPECTED_MS - 1.0 for r in results)


def test_routes_predict_the_transfer_and_the_cost(cluster: LocalCluster) -> None:
    routes = [m["value"] for m in read(cluster, f"routes.{CLASS}", COUNT)]
    route = validator("routes")
    for r in routes:
        assert route.is_valid(r), r
        assert r["predicted_transfer_ms"] > 0 and r["predicted_cost"] > 0
        assert r["compared"][0]["device_class"] == CLASS
    # The first is charged the declared link; later ones what was measured (about the same).
    assert routes[0]["predicted_transfer_ms"] == pytest.approx(EXPECTED_MS, rel=0.05)


def test_the_worker_learns_the_transfer_and_shows_the_link(cluster: LocalCluster) -> None:
    def learned() -> bool:
        model = {m["device_class"]: m for m in cluster.api("/api/models")["models"]}.get(CLASS)
        return bool(model and model["transfer"] and model["transfer"]["rows"] >= COUNT)
    wait_until(learned, 30, "the transfer rows learned")
    model = {m["device_class"]: m for m in cluster.api("/api/models")["models"]}[CLASS]
    assert model["transfer"]["last_ms"] == pytest.approx(EXPECTED_MS, abs=30.0)
    devices = {d["device_id"]: d for d in cluster.api("/api/devices")["devices"]}
    assert devices["remote-h100"]["link"] == {"rtt_ms": RTT_MS, "bandwidth_mbit_s": MBIT_S}
    assert devices["remote-h100"]["price_per_hour"] == PRICE
    assert devices["remote-h100"]["power_model"] == "h100"
    assert "liar" not in devices  # its heartbeat was refused
    beats = [m["value"] for m in read(cluster, "heartbeats", 1)]
    assert all(validator("heartbeats").is_valid(b) for b in beats if b.get("device_id") != "liar")


def test_bad_input_is_dead_lettered_with_its_reason(cluster: LocalCluster) -> None:
    letters = [m["value"] for m in read(cluster, "deadletter", len(BAD) + 1)]
    by_key = {d["key"]: d for d in letters}
    assert validator("deadletter").is_valid(letters[0])
    assert "objective must be" in by_key["bad-objective"]["reason"]
    assert "deadline_ms must be a finite number" in by_key["bad-deadline"]["reason"]
    assert "max_cost must be >= 0" in by_key["bad-ceiling"]["reason"]
    assert "within max_cost 0" in by_key["over-budget"]["reason"]
    assert by_key["liar"]["stage"] == "registry" and "bandwidth" in by_key["liar"]["reason"]
