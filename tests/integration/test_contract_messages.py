"""docs/contract.md against a real pipeline: a message of every topic, produced by a worker and
an executor started with LocalCluster, validates against its JSON Schema; partitioning, the
one-result-per-workload guarantee and the checksum definition hold; the kcat examples of the
contract run as written (kcat is installed by .ci/run; elsewhere the test skips when it is
missing and says ``apt-get install -y kcat``).

One cluster for the module: a worker takes 10-30 s to start on a small machine.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from aiokafka.partitioner import murmur2

from app.local import LocalCluster
from app.records import metric_rows
from app.settings import Settings
from models.tensors import encode_tensor
from models.traces import synthetic_trace
from tests.conftest import require_tool
from tests.integration.kafka_io import consume_until, produce

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "app" / "schemas"
CONTRACT = ROOT / "docs" / "contract.md"
COUNT = 16
PARTITIONS = Settings().workload_partitions
CLASS = "numpy-cpu-x86"
RNG = np.random.default_rng(7)
A = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal((3, 2)).astype(np.float32)
INLINE = {"id": "inline-1", "op": {"kind": "matmul", "m": 4, "k": 3, "n": 2},
          "inputs": {"a": encode_tensor(A), "b": encode_tensor(B)}, "return_output": True}


def kafka_partition(key: str, partitions: int) -> int:
    """Kafka's default (Java, aiokafka) partition of a key."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def schema_validator(topic: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        json.loads((SCHEMAS / f"{topic}.schema.json").read_text()))


def wait_until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.isolated(tmp_path_factory.mktemp("contract"), broker=broker)
    try:
        worker = local.start_worker()
        # A real runtime only: a sim device computes no output and has no checksum.
        executor = local.start_executor("numpy")
        local.wait_ready(worker, timeout_s=180)
        local.wait_devices([executor.name], timeout_s=120)
        workloads = synthetic_trace(COUNT - 1, seed=5, id_prefix="c-") + [INLINE]
        ns = local.namespace
        asyncio.run(produce(broker, f"{ns}switchyard.workloads",
                            [(w["id"], w) for w in workloads] + [("bad-1", b"not json")]))

        def settled() -> bool:
            totals = local.api("/api/dashboard")["totals"]
            return totals["results"].get("ok", 0) >= COUNT and totals["deadletters"] >= 1
        wait_until(settled, 120, "every result and the dead letter")
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def messages(cluster: LocalCluster) -> dict[str, list[dict[str, Any]]]:
    """Every topic's messages, read from the beginning."""
    ns, broker = cluster.namespace, cluster.broker
    wanted = {"workloads": COUNT + 1, f"routes.{CLASS}": COUNT, "metrics": COUNT,
              "heartbeats": 1, "results": COUNT, "outcomes": COUNT, "deadletter": 1}

    async def read_all() -> dict[str, list[dict[str, Any]]]:
        out = {}
        for topic, count in wanted.items():
            # Raw records: the metrics topic's may each carry many executions (its batch form).
            out[topic] = await consume_until(
                broker, f"{ns}switchyard.{topic}",
                lambda m, n=count, t=topic: sum(map(len, rows_of(m))) >= n if t == "metrics"
                else len(m) >= n,
                timeout_s=30, decode=False)
        return out
    return asyncio.run(read_all())


def rows_of(messages: list[dict[str, Any]]) -> list[list[Any]]:
    """The executions each raw metrics record carries (app.records.metric_rows)."""
    return [metric_rows(decoded(m)) for m in messages]


def decoded(message: dict[str, Any]) -> dict[str, Any]:
    value = message["value"]
    return dict(json.loads(value if isinstance(value, bytes | str) else json.dumps(value)))


def key_of(message: dict[str, Any]) -> str:
    key = message["key"]
    return key.decode() if isinstance(key, bytes) else str(key)


@pytest.mark.parametrize("topic", ["workloads", f"routes.{CLASS}", "metrics", "heartbeats",
                                   "results", "outcomes", "deadletter"])
def test_messages_validate_against_their_schema(messages: dict[str, list[dict[str, Any]]],
                                                topic: str) -> None:
    validator = schema_validator(topic.split(".")[0])
    checked = 0
    for message in messages[topic]:
        if topic == "workloads" and key_of(message) == "bad-1":
            continue  # the deliberately broken request: its dead letter is checked instead
        errors = [e.message for e in validator.iter_errors(decoded(message))]
        assert errors == [], f"{topic} {key_of(message)}: {errors}"
        checked += 1
    assert checked >= 1


def test_the_bad_request_is_dead_lettered_with_its_bytes(
        messages: dict[str, list[dict[str, Any]]], cluster: LocalCluster) -> None:
    [dead] = [decoded(m) for m in messages["deadletter"]]
    assert dead["topic"] == f"{cluster.namespace}switchyard.workloads"
    assert dead["stage"] == "decide" and dead["key"] == "bad-1"
    assert base64.b64decode(dead["raw_b64"]) == b"not json"
    assert "JSON" in dead["reason"]


def test_partitioning(messages: dict[str, list[dict[str, Any]]]) -> None:
    metric_partitions = Settings().metric_partitions
    for topic in ("metrics", "heartbeats"):
        for message in messages[topic]:
            for row in metric_rows(decoded(message)) if topic == "metrics" else [decoded(message)]:
                device_class = row["device_class"]
                assert (message["partition"]
                        == zlib.crc32(device_class.encode()) % metric_partitions)
    workload_partition = {key_of(m): m["partition"] for m in messages["workloads"]}
    for message in messages["results"]:
        key = key_of(message)
        assert decoded(message)["id"] == key
        assert message["partition"] == workload_partition[key] == kafka_partition(key, PARTITIONS)
    for message in messages[f"routes.{CLASS}"]:
        assert decoded(message)["id"] == key_of(message)


def test_one_result_per_workload(messages: dict[str, list[dict[str, Any]]]) -> None:
    keys = [key_of(m) for m in messages["results"]]
    assert len(keys) == len(set(keys)) == COUNT
    assert all(decoded(m)["status"] == "ok" for m in messages["results"])


def test_checksum_definition(messages: dict[str, list[dict[str, Any]]]) -> None:
    [result] = [decoded(m) for m in messages["results"] if key_of(m) == "inline-1"]
    output = result["output"]
    raw = base64.b64decode(output["data_b64"])
    array = np.frombuffer(raw, dtype="<f4").reshape(output["shape"])
    np.testing.assert_allclose(array, A.astype(np.float64) @ B.astype(np.float64),
                               rtol=1e-5, atol=1e-6)
    expected = "sha256:" + hashlib.sha256(array.astype("<f4").tobytes()).hexdigest()
    assert result["checksum"] == expected
    others = [decoded(m)["checksum"] for m in messages["results"]]
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", c) for c in others)


def doc_command(marker: str, cluster: LocalCluster) -> str:
    """The command under ``marker`` in docs/contract.md, pointed at this cluster."""
    text = CONTRACT.read_text()
    match = re.search(rf"<!-- {marker} -->\s*```sh\n(.+?)\n```", text, re.S)
    assert match, f"docs/contract.md has no {marker} example"
    command = match.group(1)
    return (command.replace("127.0.0.1:9092", cluster.broker)
            .replace("-t switchyard.", f"-t {cluster.namespace}switchyard."))


def test_kcat_examples_run_as_documented(cluster: LocalCluster) -> None:
    require_tool("kcat", install="apt-get install -y kcat")
    produced = subprocess.run(["bash", "-c", doc_command("kcat-produce", cluster)],
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr

    def answered() -> bool:
        return any(d["id"] == "kcat-1" for d in cluster.api("/api/decisions?limit=500")[
            "decisions"] if d.get("measured_ms") is not None)
    wait_until(answered, 60, "the kcat workload's result")
    consumed = subprocess.run(["bash", "-c", doc_command("kcat-consume", cluster)],
                              capture_output=True, text=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    validator = schema_validator("results")
    rows = [line.split("\t", 2) for line in consumed.stdout.splitlines() if line.strip()]
    assert len(rows) == COUNT + 1
    for key, partition, value in rows:
        result = json.loads(value)
        assert result["id"] == key and validator.is_valid(result)
        # murmur2_random put the kcat workload where a Java client would have: its result too.
        assert int(partition) == kafka_partition(key, PARTITIONS)
    assert "kcat-1" in {key for key, _, _ in rows}


def test_the_executor_reports_its_calibration_and_the_prior_runs_at_it(
        messages: dict[str, list[dict[str, Any]]], cluster: LocalCluster) -> None:
    """A CPU executor measures its matmul rate per precision and its reference kernels before
    it serves; its heartbeats carry them and the class's cost model is built on a prior at
    those rates, each measured kind's roofline bent by its reference op."""
    beats = [decoded(m) for m in messages["heartbeats"]]
    calibration = beats[0]["calibration"]
    assert set(calibration) == {"fp32"}  # NumPy offers no other matmul precision here
    assert calibration["fp32"] > 0.1
    model = next(m for m in cluster.api("/api/models")["models"]
                 if m["device_class"] == CLASS)
    assert model["prior_device"].endswith("~calibrated")
    assert model["prior_gflops"]["fp32"] == pytest.approx(calibration["fp32"])
    from models.priors import ACTIVATED, DISPATCH, DISPATCH_OP, REFERENCE_POINTS, reference_kind

    kernels = beats[0]["kernel_ms"]
    kinds = {reference_kind(signature) for signature in kernels} - {DISPATCH}
    assert kinds and kinds <= set(REFERENCE_POINTS)
    # The reference linear with gelu is not a kind's factor: it gives gelu's cost per element.
    assert set(model["prior_kind_factors"]) == {f"{kind}/fp32" for kind in kinds
                                                if not kind.startswith(ACTIVATED)}
    assert all(factor > 0 for factor in model["prior_kind_factors"].values())
    if {"linear", "linear.gelu"} <= kinds:
        assert set(model["prior_activation_ns"]) == {"gelu/fp32"}
        assert model["prior_activation_ns"]["gelu/fp32"] >= 0
    dispatch_ms = kernels[DISPATCH_OP.signature()]["fp32"]
    assert model["prior_overhead_us"] == pytest.approx(dispatch_ms * 1e3)
