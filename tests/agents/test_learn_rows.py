"""What the cost models learn from a metric row (agents/learn.py::metric_row): an unbatched
execution as its op; a batched call once, as the one op it computed, taking the call's time."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.learn import batch_call, metric_row, parse_metric
from models.ops import BmmSpec, MatmulSpec

MATMUL = {"kind": "matmul", "m": 8, "k": 4, "n": 2}


def row(**change: Any) -> Any:
    data = {"workload_id": "w1", "device_id": "d1", "device_class": "torch-cpu-x86",
            "runtime": "torch", "op": MATMUL, "variant": {"precision": "fp32", "mode": "eager"},
            "flops": 128.0, "bytes_moved": 176.0, "status": "ok", "queue_ms": 0.0,
            "exec_ms": 0.5, "started_at_ms": 10, "finished_at_ms": 12, "energy_j": 0.25,
            **change}
    return parse_metric(json.dumps(data).encode())


def test_an_unbatched_row_is_its_op() -> None:
    learned = metric_row(row())
    assert learned is not None
    op, variant, exec_ms, energy = learned
    assert op == MatmulSpec(m=8, k=4, n=2) and variant.precision == "fp32"
    assert exec_ms == 0.5 and energy == 0.25 and batch_call(row()) is None


def test_a_batched_call_is_learned_as_its_equivalent_op() -> None:
    batched = row(exec_ms=0.25, batch_size=4, batch_exec_ms=1.0)
    learned = metric_row(batched)
    assert learned is not None
    op, _, exec_ms, energy = learned
    assert op == BmmSpec(b=4, m=8, k=4, n=2) and exec_ms == 1.0 and energy == 1.0
    # Every row of one call has the same identity, so the call is learned once.
    assert batch_call(batched) == batch_call(row(workload_id="w2", exec_ms=0.25, batch_size=4,
                                                 batch_exec_ms=1.0))
    assert batch_call(batched) != batch_call(row(batch_size=4, batch_exec_ms=1.0,
                                                 started_at_ms=13))


def test_a_batched_call_of_an_op_with_weights_per_workload_is_not_learned() -> None:
    linear = {"kind": "linear", "batch": 2, "in_features": 3, "out_features": 4}
    assert metric_row(row(op=linear, batch_size=3, batch_exec_ms=0.9)) is None


def test_a_batched_row_without_its_call_time_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_exec_ms"):
        metric_row(row(batch_size=3))
