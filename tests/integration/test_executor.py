"""A real executor process on the real broker: routes in; outcomes, metrics, heartbeats and
dead letters out; a slowdown file honoured; SIGTERM handled cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.ops import make_inputs, parse_op, reference
from models.tensors import checksum, decode_tensor, encode_tensor
from runtimes.base import machine_arch
from runtimes.check import within_tolerance
from tests.integration.kafka_io import consume_until, create_topics, produce

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]
DEVICE_CLASS = f"numpy-cpu-{machine_arch()}"
PARTITIONS = 4  # the settings' default metric_partitions, which the executor creates


def route(
    workload_id: str, op: dict[str, Any], precision: str = "fp32", **extra: Any
) -> dict[str, Any]:
    """A route record as the decider writes it."""
    return {
        "id": workload_id,
        "workload": {
            "id": workload_id,
            "op": op,
            "precisions": [precision],
            "submitted_at_ms": 1,
            **extra,
        },
        "device_class": DEVICE_CLASS,
        "variant": {"precision": precision, "mode": "eager"},
        "predicted_ms": 1.0,
        "predicted_std_ms": 0.5,
        "reason": "explore",
        "model_version": 0,
        "decided_at_ms": 2,
    }


async def test_executor_serves_routes_end_to_end(broker: str, unique: str, tmp_path: Path) -> None:
    ns = f"t{unique}."
    names = {k: f"{ns}switchyard.{k}" for k in ("metrics", "heartbeats", "outcomes", "deadletter")}
    routes = f"{ns}switchyard.routes.{DEVICE_CLASS}"
    await create_topics(broker, [routes], partitions=2)
    slowdown = tmp_path / "slowdown"
    slowdown.write_text("1")
    env = {
        **os.environ,
        "SWITCHYARD_BROKER": broker,
        "SWITCHYARD_TOPIC_NAMESPACE": ns,
        "SWITCHYARD_HEARTBEAT_INTERVAL_S": "0.5",
        "OMP_NUM_THREADS": "1",
    }
    log_path = tmp_path / "executor.log"
    log = open(log_path, "w")  # noqa: SIM115  (closed in finally, after the process exits)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "executor",
            "--runtime",
            "numpy",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--id",
            "dev-1",
            "--slowdown-file",
            str(slowdown),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def died() -> str | None:
        return None if proc.poll() is None else "executor exited:\n" + log_path.read_text()[-3000:]

    try:
        linear = {
            "kind": "linear",
            "batch": 3,
            "in_features": 8,
            "out_features": 4,
            "activation": "gelu",
        }
        spec = parse_op(linear)
        arrays = make_inputs(spec, 99)
        inline = {k: encode_tensor(v) for k, v in arrays.items()}
        ok_ops = {
            "ok-matmul": {"kind": "matmul", "m": 4, "k": 5, "n": 6},
            "ok-conv": {
                "kind": "conv2d",
                "batch": 1,
                "in_channels": 2,
                "out_channels": 3,
                "height": 6,
                "width": 6,
                "kernel": 3,
            },
            "ok-attention": {
                "kind": "attention",
                "batch": 1,
                "heads": 2,
                "seq_len": 4,
                "head_dim": 8,
                "causal": True,
            },
        }
        records: list[tuple[str | None, Any]] = [(i, route(i, op)) for i, op in ok_ops.items()]
        records += [
            ("ok-inline", route("ok-inline", linear, inputs=inline, return_output=True)),
            ("err-refused", route("err-refused", linear, precision="bf16")),
            (
                "err-precision",
                {
                    **route("err-precision", linear),
                    "variant": {"precision": "fp16", "mode": "eager"},
                },
            ),
            ("err-spec", route("err-spec", {"kind": "matmul", "m": 0, "k": 1, "n": 1})),
            ("garbage", b"\xff not json"),
            (None, {"no": "id"}),
            ("ok-after", route("ok-after", {"kind": "softmax", "rows": 2, "dim": 5})),
        ]
        await produce(broker, routes, records)
        expected = set(ok_ops) | {
            "ok-inline",
            "err-refused",
            "err-precision",
            "err-spec",
            "ok-after",
        }

        outcomes = await consume_until(
            broker,
            names["outcomes"],
            lambda m: {x["key"] for x in m} >= expected,
            timeout_s=90,
            abort=died,
        )
        by_id = {m["key"]: m["value"] for m in outcomes}
        assert set(by_id) == expected
        for wid in expected:
            o = by_id[wid]
            assert (
                o["id"] == wid and o["device_id"] == "dev-1" and o["device_class"] == DEVICE_CLASS
            )
            assert o["status"] == ("ok" if wid.startswith("ok") else "error"), o
        assert "NumPy has no bfloat16" in by_id["err-refused"]["error"]
        assert "not among the request's precisions" in by_id["err-precision"]["error"]
        assert "must be >= 1" in by_id["err-spec"]["error"]
        inline_out = by_id["ok-inline"]
        output = decode_tensor(inline_out["output"], 10_000)
        assert within_tolerance(output, reference(spec, arrays), "fp32")[0]
        assert inline_out["checksum"] == checksum(output)
        assert inline_out["queue_ms"] >= 0 and inline_out["latency_ms"] > 0
        assert by_id["ok-matmul"]["output"] is None and by_id["ok-matmul"]["checksum"].startswith(
            "sha256:"
        )

        metrics = await consume_until(
            broker, names["metrics"], lambda m: len(m) >= len(expected), timeout_s=30, abort=died
        )
        assert sorted(m["value"]["workload_id"] for m in metrics) == sorted(expected)
        partition = zlib.crc32(DEVICE_CLASS.encode()) % PARTITIONS
        assert {(m["key"], m["partition"]) for m in metrics} == {("dev-1", partition)}
        matmul_metric = next(
            m["value"] for m in metrics if m["value"]["workload_id"] == "ok-matmul"
        )
        assert matmul_metric["flops"] == 2 * 4 * 5 * 6 and matmul_metric["exec_ms"] > 0
        assert (
            matmul_metric["runtime"] == "numpy"
            and matmul_metric["energy_j"] is None
            or matmul_metric["energy_j"] >= 0
        )
        assert not matmul_metric["throttled"] and not matmul_metric["simulated"]

        dead = await consume_until(
            broker, names["deadletter"], lambda m: len(m) >= 2, timeout_s=30, abort=died
        )
        reasons = sorted(m["value"]["reason"] for m in dead)
        assert any("not UTF-8" in r for r in reasons) and any(
            "no workload id" in r for r in reasons
        )
        assert all(
            m["value"]["topic"] == routes and m["value"]["stage"] == "executor" for m in dead
        )

        beats = await consume_until(
            broker, names["heartbeats"], lambda m: len(m) >= 2, timeout_s=30, abort=died
        )
        beat = beats[-1]["value"]
        assert beats[-1]["key"] == "dev-1" and beats[-1]["partition"] == partition
        assert beat["device_class"] == DEVICE_CLASS and beat["runtime"] == "numpy"
        assert ["matmul", "fp32", "eager"] in beat["capabilities"]
        assert not any(c[1] != "fp32" for c in beat["capabilities"])
        assert beat["memory_bytes"] > 0 and beat["queue_depth"] >= 0
        # Pinned (--threads 1): its core and its host, which tell the router what it shares.
        assert len(beat["cpus"]) == 1 and beat["host"] == socket.gethostname()

        # A slowed device really takes longer and says so.
        slowdown.write_text("4")
        await produce(
            broker, routes, [("slow", route("slow", {"kind": "matmul", "m": 64, "k": 64, "n": 64}))]
        )
        metrics = await consume_until(
            broker,
            names["metrics"],
            lambda m: any(x["value"]["workload_id"] == "slow" for x in m),
            timeout_s=30,
            abort=died,
        )
        slow = next(m["value"] for m in metrics if m["value"]["workload_id"] == "slow")
        assert slow["throttled"] and slow["status"] == "ok"

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log_path.read_text()[-3000:]
        beats = await consume_until(
            broker,
            names["heartbeats"],
            lambda m: any(b["value"]["state"] == "stopping" for b in m),
            timeout_s=10,
        )
        assert beats[-1]["value"]["state"] == "stopping"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


def test_reference_checksum_is_reproducible() -> None:
    """What a client recomputes from an inline output equals what the executor sent."""
    out = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert checksum(decode_tensor(encode_tensor(out), 100)) == checksum(out)


async def test_sigterm_finishes_the_op_in_hand(broker: str, unique: str, tmp_path: Path) -> None:
    """A sim executor gets SIGTERM mid-op: the outcome is still published, then it exits 0."""
    ns = f"t{unique}."
    routes = f"{ns}switchyard.routes.sim-cpu-core"
    await create_topics(broker, [routes])
    env = {**os.environ, "SWITCHYARD_BROKER": broker, "SWITCHYARD_TOPIC_NAMESPACE": ns}
    log_path = tmp_path / "executor.log"
    log = open(log_path, "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "executor",
            "--runtime",
            "sim",
            "--device",
            "cpu-core",
            "--id",
            "sim-1",
            "--drift",
            "0:4",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # 2*2048^3 FLOP at 192 GFLOP/s x drift 4 ~ 0.36 s; the slow one ~3 s.
        fast = {"kind": "matmul", "m": 2048, "k": 2048, "n": 2048}
        slow = {"kind": "matmul", "m": 4096, "k": 4096, "n": 4096}
        r1, r2 = route("fast", fast), route("slow", slow)
        for r in (r1, r2):
            r["device_class"] = "sim-cpu-core"
        await produce(broker, routes, [("fast", r1), ("slow", r2)])
        metrics_topic = f"{ns}switchyard.metrics"
        await consume_until(
            broker,
            metrics_topic,
            lambda m: len(m) >= 1,
            timeout_s=60,
            abort=lambda: None if proc.poll() is None else log_path.read_text(),
        )
        time.sleep(0.5)  # well inside the slow op
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log_path.read_text()[-3000:]
        outcomes = await consume_until(
            broker, f"{ns}switchyard.outcomes", lambda m: len(m) >= 2, timeout_s=10
        )
        by_id = {m["key"]: m["value"] for m in outcomes}
        assert by_id["slow"]["status"] == "ok" and by_id["slow"]["simulated"]
        # The fast op's outcome did not wait for the slow op behind it: the linger timer
        # published it while the slow one ran (~3 s), not with it at the end of the batch.
        published = {m["key"]: m["timestamp_ms"] for m in outcomes}
        assert published["fast"] < by_id["slow"]["finished_at_ms"] - 1000
        assert by_id["slow"]["latency_ms"] > 2000  # the drift factor 4 really applied
        assert by_id["slow"]["checksum"] is None
        # A sim device's energy is modelled from its published power, and says so.
        assert by_id["slow"]["energy_j"] > 0 and by_id["slow"]["energy_simulated"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
