"""Dynamic batching in a real torch executor on the real broker: a burst of identical matmuls
runs in batched calls, and every workload still gets exactly one outcome and one metric, with
the checksum its own unbatched call gives."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.records import outcome_rows
from app.settings import Settings
from app.topics import key_partition
from models.ops import Variant, make_inputs, parse_op
from models.tensors import checksum
from runtimes import get_runtime
from runtimes.base import machine_arch
from tests.integration.kafka_io import consume_until, create_topics, produce

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]
DEVICE_CLASS = f"torch-cpu-{machine_arch()}"
OP = {"kind": "matmul", "m": 24, "k": 16, "n": 8}
BURST = 40


def route(workload_id: str, seed: int) -> dict[str, Any]:
    return {
        "id": workload_id,
        "workload": {"id": workload_id, "op": OP, "precisions": ["fp32"], "seed": seed,
                     "submitted_at_ms": 1},
        "device_class": DEVICE_CLASS,
        "variant": {"precision": "fp32", "mode": "eager"},
        "predicted_ms": 0.1,
        "predicted_std_ms": 0.1,
        "reason": "explore",
        "model_version": 0,
        "decided_at_ms": 2,
    }


@contextlib.contextmanager
def torch_executor(broker: str, ns: str, tmp_path: Path, device_id: str,
                   **env: str) -> Iterator[Callable[[], str | None]]:
    """A torch CPU executor process on one thread in namespace ``ns``, stopped on exit; yields
    a check that says (with its log) when it has died."""
    full_env = {**os.environ, "SWITCHYARD_BROKER": broker, "SWITCHYARD_TOPIC_NAMESPACE": ns,
                "OMP_NUM_THREADS": "1", **env}
    log_path = tmp_path / "executor.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "executor", "--runtime", "torch", "--device",
             "cpu", "--threads", "1", "--id", device_id],
            cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)

        def died() -> str | None:
            return (None if proc.poll() is None
                    else "executor exited:\n" + log_path.read_text()[-3000:])

        try:
            yield died
        finally:
            proc.terminate()
            proc.wait(30)


async def test_a_burst_runs_batched_with_one_result_each(
        broker: str, unique: str, tmp_path: Path) -> None:
    ns = f"t{unique}."
    routes = f"{ns}switchyard.routes.{DEVICE_CLASS}"
    await create_topics(broker, [routes], partitions=2)
    ids = [f"mm-{i}" for i in range(BURST)]
    # The whole burst is queued before the executor starts, so its first fetch holds it.
    await produce(broker, routes, [(wid, route(wid, seed=i)) for i, wid in enumerate(ids)])
    with torch_executor(broker, ns, tmp_path, "batcher",
                        SWITCHYARD_EXECUTOR_MAX_BATCH="16") as died:
        outcomes = await consume_until(
            broker, f"{ns}switchyard.outcomes", lambda m: {x["key"] for x in m} >= set(ids),
            timeout_s=90, abort=died)
        metrics = await consume_until(
            broker, f"{ns}switchyard.metrics", lambda m: len(m) >= BURST, timeout_s=30,
            abort=died)
    assert sorted(m["key"] for m in outcomes) == sorted(ids)  # exactly once each
    assert sorted(m["value"]["workload_id"] for m in metrics) == sorted(ids)
    # The outcomes travelled in batches (the outcomes topic's batch form), each outcome on its
    # workload id's partition (where the worker completes that workload), the record keyed by
    # its first outcome's id.
    raw = await consume_until(broker, f"{ns}switchyard.outcomes",
                              lambda m: len(m) >= 1, timeout_s=10, decode=False)
    partitions = Settings().workload_partitions  # as the executor created the topic
    carried = []
    for record in raw:
        value = json.loads(record["value"])
        batch = outcome_rows(value)
        assert len(batch) == 1 or value["version"] == 2
        assert record["key"] == batch[0]["id"]
        for outcome in batch:
            assert key_partition(outcome["id"], partitions) == record["partition"]
        carried.append(len(batch))
    assert sum(carried) == BURST and max(carried) > 1 and len(raw) < BURST
    rows = {m["value"]["workload_id"]: m["value"] for m in metrics}
    sizes = [row["batch_size"] for row in rows.values()]
    assert max(sizes) > 1 and max(sizes) <= 16
    for row in rows.values():
        assert row["status"] == "ok"
        if row["batch_size"] > 1:
            assert row["exec_ms"] == pytest.approx(row["batch_exec_ms"] / row["batch_size"])
        else:
            assert row["batch_exec_ms"] is None
    # The checksum each workload's own, unbatched call gives (same fp32 kernel, same bits).
    rt = get_runtime("torch", "cpu", threads=1)
    spec = parse_op(OP)
    by_id = {m["key"]: m["value"] for m in outcomes}
    for i, wid in enumerate(ids):
        alone = rt.execute(spec, Variant("fp32"), make_inputs(spec, i))
        assert by_id[wid]["status"] == "ok" and by_id[wid]["checksum"] == checksum(alone.output)
        assert by_id[wid]["batch_size"] == rows[wid]["batch_size"]


async def test_a_batch_wait_gathers_routes_that_arrive_one_by_one(
        broker: str, unique: str, tmp_path: Path) -> None:
    """With ``executor_batch_wait_ms``, routes produced one after another to an idle executor
    run as one batch: it waits for more before running the first."""
    ns = f"t{unique}."
    routes = f"{ns}switchyard.routes.{DEVICE_CLASS}"
    await create_topics(broker, [routes], partitions=1)
    # Far longer than the four sends take, so the test does not depend on how fast they are.
    with torch_executor(broker, ns, tmp_path, "waiter",
                        SWITCHYARD_EXECUTOR_BATCH_WAIT_MS="5000") as died:
        # Serving and fetching: a first route's outcome is back (after its own wait).
        await produce(broker, routes, [("ready", route("ready", seed=99))])
        await consume_until(broker, f"{ns}switchyard.outcomes",
                            lambda m: any(x["key"] == "ready" for x in m), timeout_s=60,
                            abort=died)
        ids = [f"one-by-one-{i}" for i in range(4)]
        for i, wid in enumerate(ids):
            await produce(broker, routes, [(wid, route(wid, seed=i))])
        outcomes = await consume_until(
            broker, f"{ns}switchyard.outcomes", lambda m: {x["key"] for x in m} >= set(ids),
            timeout_s=60, abort=died)
    by_id = {m["key"]: m["value"] for m in outcomes}
    assert sorted(m["key"] for m in outcomes) == sorted(ids + ["ready"])
    assert [by_id[wid]["batch_size"] for wid in ids] == [4, 4, 4, 4]
