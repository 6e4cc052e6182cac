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


def test_the_learner_goes_on_from_the_models_it_wrote_only_while_they_are_the_stored_ones(
) -> None:
    from agents import learn
    from models.costmodel import CostModel
    from models.history import HistoryModel
    from models.ops import Variant, parse_op

    op, variant = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64}), Variant("fp32")
    model, hist = CostModel.for_class("sim-h100"), HistoryModel()
    model.learn_one(op, variant, 2.0)
    hist.observe("sim-h100", op, variant, 2.0)
    learn._LAST_WRITTEN["sim-h100"] = (model, hist)
    try:
        stored, stored_history = model.to_dict(), hist.to_dict()
        assert learn.learned_state("sim-h100", stored, stored_history) == (model, hist)
        # another worker learned on (a rebalance): its stored state wins
        other = CostModel.from_dict(stored)
        other.learn_one(op, variant, 9.0)
        rebuilt, _ = learn.learned_state("sim-h100", other.to_dict(), stored_history)
        assert rebuilt is not model and rebuilt.version == other.version
        assert rebuilt.samples == 2
        cold, cold_history = learn.learned_state("sim-l4", None, None)
        assert cold.samples == 0 and cold_history.version == 0
    finally:
        learn._LAST_WRITTEN.pop("sim-h100", None)


def test_the_model_learns_the_cpu_time_where_a_shared_core_stretched_the_wall_time() -> None:
    import numpy as np

    from agents.learn import model_times

    nan = float("nan")
    exec_ms = np.array([10.0, 10.0, 10.0, 4.0, 10.0, 10.0])
    cpu_ms = np.array([5.0, 14.0, nan, 1.0, 5.0, 9.0])
    single = np.array([True, True, True, False, True, True])
    learned = model_times(exec_ms, cpu_ms, single)
    # stretched by a neighbour: the CPU time; several cores busy: the wall time; not
    # measured (GPU, sim, older executors): the wall time; a batched call: its call time;
    # CPU time a little below the wall time (an op alone on its core): the wall time
    assert learned.tolist() == [5.0, 10.0, 10.0, 4.0, 5.0, 10.0]
    assert exec_ms.tolist() == [10.0, 10.0, 10.0, 4.0, 10.0, 10.0]  # the history's, untouched
    # The row-by-row form agrees.
    learned = metric_row(row(cpu_ms=0.2))
    assert learned is not None and learned[2] == 0.2
    learned = metric_row(row(cpu_ms=0.45))
    assert learned is not None and learned[2] == 0.5
    learned = metric_row(row(cpu_ms=0.9))
    assert learned is not None and learned[2] == 0.5
