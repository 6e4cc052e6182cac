"""The metrics topic's columnar form (version 3) and the metric stage's column-wise parse:
the same good rows and the same refusals, with the same reasons, as the row form; a record
whose structure or shared field is wrong refused whole; and the learn stage's column-wise
learning equal to learning the rows `metric_row` gives, one class at a time."""

from __future__ import annotations

import asyncio
import contextlib
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest

import agents.learn as learn
from agents.learn import batch_call, metric_row, parse_metrics
from agents.metricbatch import MetricBatch, parse_block
from app.records import metric_columns, metric_columns_bytes, metric_count, metric_rows
from models.costmodel import CostModel
from models.history import HistoryModel

MATMUL = {"kind": "matmul", "m": 8, "k": 4, "n": 2}
SOFTMAX = {"kind": "softmax", "rows": 4, "dim": 16}
FP32 = {"precision": "fp32", "mode": "eager"}


def row(i: int, **change: Any) -> dict[str, Any]:
    return {"workload_id": f"w{i}", "device_id": "d1", "device_class": "torch-cpu-x86",
            "runtime": "torch", "op": MATMUL if i % 3 else SOFTMAX, "variant": FP32,
            "flops": 128.0, "bytes_moved": 176.0, "status": "ok", "queue_ms": 0.0,
            "exec_ms": 0.5 + i / 100, "started_at_ms": 10 + i, "finished_at_ms": 12 + i,
            "energy_j": None, "setup_ms": None, "batch_size": 1, "batch_exec_ms": None,
            "cpu_ms": None,
            **change}


def columnar(rows: list[dict[str, Any]]) -> bytes:
    return orjson.dumps(metric_columns(rows))


def as_dicts(metrics: list[Any]) -> list[dict[str, Any]]:
    return [dict(m.__dict__) for m in metrics]


def test_columnar_form_round_trips_and_shares_what_rows_share() -> None:
    rows = [row(i) for i in range(10)]
    data = metric_columns(rows)
    assert data["version"] == 3 and data["rows"] == 10
    assert data["fields"]["device_class"] == "torch-cpu-x86" and "exec_ms" in data["columns"]
    assert data["columns"]["op"] == {"values": [SOFTMAX, MATMUL],
                                     "index": [0 if i % 3 == 0 else 1 for i in range(10)]}
    assert metric_rows(data) == rows and metric_count(data) == 10
    assert metric_rows(json.loads(metric_columns_bytes([orjson.dumps(r) for r in rows]))) == rows
    # One row stays the one-row form; rows whose fields differ fall back to version 2.
    assert metric_columns_bytes([orjson.dumps(rows[0])]) == orjson.dumps(rows[0])
    mixed = [orjson.dumps(rows[0]),
             orjson.dumps({k: v for k, v in rows[1].items() if k != "setup_ms"})]
    assert json.loads(metric_columns_bytes(mixed))["version"] == 2


def test_columnar_parse_equals_the_row_form_on_good_rows() -> None:
    rows = [row(i, energy_j=0.1 * i if i % 2 else None, setup_ms=5.0 if i == 4 else None)
            for i in range(12)]
    by_columns, refused_c = parse_metrics(columnar(rows))
    by_objects, refused_o = parse_metrics(orjson.dumps({"version": 2, "metrics": rows}))
    assert refused_c == refused_o == []
    assert as_dicts(by_columns) == as_dicts(by_objects)
    block, _ = parse_block(columnar(rows))
    assert block.rows == 12 and len(block.shapes) == 2
    assert [block.shapes[k][0] for k in block.shape_index] == [r["op"] for r in rows]


@pytest.mark.parametrize("bad", [
    {"exec_ms": "slow"},  # wrong kind in a plain column
    {"exec_ms": -1.0},  # a number out of range
    {"exec_ms": None},  # null in a required column
    {"energy_j": "hot"},  # wrong kind in an optional column
    {"batch_size": 2.5},  # an integer column holding a float
    {"variant": "fast"},  # a dictionary-encoded column's value of the wrong kind
])
def test_a_bad_row_is_refused_alone_with_the_row_forms_reason(bad: dict[str, Any]) -> None:
    rows = [row(i) for i in range(6)]
    rows[2] = {**rows[2], **bad}
    rows[5] = {**rows[5], **bad}
    good_c, refused_c = parse_metrics(columnar(rows))
    good_o, refused_o = parse_metrics(orjson.dumps({"version": 2, "metrics": rows}))
    assert [(i, reason) for i, _, reason in refused_c] == [(i, reason) for i, _, reason
                                                            in refused_o]
    assert [i for i, _, _ in refused_c] == [2, 5]
    assert "metric 2 of a batch of 6" in refused_c[0][2]
    # The refused row comes back as its producer wrote it: replayable as a one-row metric.
    assert [r for _, r, _ in refused_c] == [rows[2], rows[5]]
    assert as_dicts(good_c) == as_dicts(good_o)
    block, _ = parse_block(columnar(rows))
    assert [block.row(i)["workload_id"] for i in range(block.rows)] == ["w0", "w1", "w3", "w4"]


def test_a_bad_value_of_a_dictionary_encoded_column_refuses_every_row_using_it() -> None:
    rows = [row(i) for i in range(6)]
    data = metric_columns(rows)
    del data["fields"]["variant"]
    data["columns"]["variant"] = {"values": [FP32, ["not", "an", "object"]],
                                  "index": [0, 1, 0, 1, 1, 0]}
    good, refused = parse_metrics(orjson.dumps(data))
    assert [i for i, _, _ in refused] == [1, 3, 4] and len(good) == 3
    assert all("metric variant must be a object, got list" in r for _, _, r in refused)


def test_dictionary_values_no_kept_row_uses_are_not_learned() -> None:
    """A dictionary value of a refused row, or of none, never reaches the op parser."""
    rows = [row(i) for i in range(4)]
    data = metric_columns(rows)
    data["columns"]["op"] = {"values": [MATMUL, "junk", 7, [1]], "index": [0, 1, 0, 0]}
    block, refused = parse_block(orjson.dumps(data))
    assert [i for i, _, _ in refused] == [1] and block.rows == 3
    assert block.shapes == [(MATMUL, FP32)] and block.shape_index == [0, 0, 0]


@pytest.mark.parametrize("change, reason, structural", [
    (lambda d: d["fields"].pop("device_id"), "metric batch lacks device_id", False),
    (lambda d: d["fields"].update(status=1), "status must be a string, got int .in every row",
     False),
    (lambda d: d["fields"].update(exec_ms=d["columns"].pop("exec_ms") and -1),
     "exec_ms -1 is not a non-negative number .in", False),
    (lambda d: d["columns"]["exec_ms"].pop(), "column exec_ms has 5 values for 6 rows", True),
    (lambda d: d["columns"]["op"]["index"].__setitem__(0, 7), "index outside its 2 values",
     True),
    (lambda d: d["columns"].update(runtime=["torch"] * 6), "runtime in both fields and", True),
    (lambda d: d.update(rows=0), "rows 0 is not a positive integer", True),
    (lambda d: d.update(extra=1), "nothing else", True),
    (lambda d: d["columns"].update(exec_ms={"values": [1.0]}), "neither a list nor", True),
])
def test_a_record_of_the_wrong_structure_is_refused_whole(change: Any, reason: str,
                                                          structural: bool) -> None:
    """Dead-lettered once, whole, with the reason (the stage's parsed_batch does that with
    any ValueError of the value); a downstream reader's metric_rows refuses the structural
    ones too."""
    data = metric_columns([row(i) for i in range(6)])
    change(data)
    with pytest.raises(ValueError, match=reason):
        parse_metrics(orjson.dumps(data))
    if structural:
        with pytest.raises(ValueError, match=reason):
            metric_rows(data)


def test_blocks_of_a_batch_share_their_distinct_shapes_and_classes() -> None:
    first, _ = parse_block(columnar([row(i) for i in range(4)]))
    second, _ = parse_block(orjson.dumps(row(9, device_class="jax-cpu-x86", status="error",
                                              energy_j=0.5)))
    first.event, second.event = "e1", "e2"
    batch = MetricBatch.from_blocks([first, second])
    assert batch.rows == 5 and batch.classes == ["torch-cpu-x86", "jax-cpu-x86"]
    assert batch.class_code.tolist() == [0, 0, 0, 0, 1]
    assert len(batch.shapes) == 2 and batch.shape.tolist() == [0, 1, 1, 0, 0]
    assert batch.ok.tolist() == [True] * 4 + [False]
    assert np.isnan(batch.energy_j[:4]).all() and batch.energy_j[4] == 0.5
    assert [batch.event(i) for i in range(5)] == ["e1"] * 4 + ["e2"]
    assert batch.row(4)["workload_id"] == "w9" and batch.whole(4) and not batch.whole(0)


class _Event(SimpleNamespace):
    """What learn_batch needs of a Faust event: something to make current."""


def test_learn_batch_learns_what_metric_row_gives_row_by_row(monkeypatch) -> None:
    """Failures skipped, a batched call learned once as its equivalent op, a bad op and a
    batched row without its call time dead-lettered alone; per class the model and history
    equal learning `metric_row`'s rows in order."""
    tables: dict[str, dict[str, Any]] = {name: {} for name in
                                         ("class_models", "class_history", "models", "history")}
    for name, table in tables.items():
        monkeypatch.setattr(learn, name, table)
    dead: list[tuple[str, bytes | None]] = []

    async def dead_letter(stage: str, event: Any, reason: str, raw: bytes | None = None) -> None:
        dead.append((reason, raw))

    monkeypatch.setattr(learn, "dead_letter", dead_letter)
    call = {"batch_size": 3, "batch_exec_ms": 0.9, "exec_ms": 0.3, "started_at_ms": 50,
            "finished_at_ms": 51, "op": MATMUL}
    rows = [row(i, energy_j=0.01 * i) for i in range(20)]
    rows[3]["status"] = "error"
    rows[6:9] = [row(6 + j, **call) for j in range(3)]  # one call of three workloads
    rows[10] = row(10, op={"kind": "matmul", "m": -1, "k": 1, "n": 1})  # refused by parse_op
    rows[12] = row(12, batch_size=2)  # batched, but no call time
    rows[15] = row(15, device_class="jax-cpu-x86", setup_ms=40.0)
    rows[17] = row(17, batch_size=None)  # null: optional, but not a call of one
    rows[4] = row(4, cpu_ms=0.2)  # a shared core stretched the wall time: the model learns 0.2
    rows[5] = row(5, cpu_ms=2.0)  # several cores busy: the wall time
    blocks = []
    for part, event in ((rows[:12], _Event()), (rows[12:], _Event())):
        block, refused = parse_block(columnar(part))
        assert refused == []
        block.event = event
        blocks.append(block)
    asyncio.run(learn.learn_batch(MetricBatch.from_blocks(blocks)))

    assert len(dead) == 3 and all(raw is not None for _, raw in dead)
    assert "metric op or variant invalid" in dead[0][0]
    assert json.loads(dead[1][1] or b"")["workload_id"] == "w12"
    assert json.loads(dead[2][1] or b"")["workload_id"] == "w17"
    expected: dict[str, list[Any]] = {}
    walls: dict[str, list[Any]] = {}
    calls: set[Any] = set()
    for r in rows:
        metric = parse_metrics(orjson.dumps(r))[0][0]
        if metric.status != "ok" or r["workload_id"] in ("w10", "w12", "w17"):
            continue
        key = batch_call(metric)
        if key is not None and key in calls:
            continue
        calls.add(key)
        learned = metric_row(metric)
        if learned is not None:
            expected.setdefault(metric.device_class, []).append(learned)
            # the history (the dmda baseline's) learns the wall time
            wall = learned if key is not None else (*learned[:2], metric.exec_ms, learned[3])
            walls.setdefault(metric.device_class, []).append(wall)
    assert sorted(tables["models"]) == sorted(expected) == ["jax-cpu-x86", "torch-cpu-x86"]
    for device_class, class_rows in expected.items():
        model = CostModel.for_class(device_class)
        model.learn_many(class_rows)
        hist = HistoryModel()
        hist.observe_many(device_class, walls[device_class])
        stored = tables["class_models"][device_class]
        assert stored["time"]["rows"] == len(class_rows)
        np.testing.assert_allclose(stored["time"]["eta"], model.to_dict()["time"]["eta"],
                                   rtol=1e-9)
        if model.energy is None:  # the jax row measured no energy
            assert stored["energy"] is None and device_class == "jax-cpu-x86"
        else:
            np.testing.assert_allclose(stored["energy"]["eta"],
                                       model.to_dict()["energy"]["eta"], rtol=1e-9)
        entries = tables["class_history"][device_class]["entries"]
        assert list(entries) == list(hist.entries)
        for key, entry in hist.entries.items():
            np.testing.assert_allclose(entries[key], entry, rtol=1e-9)
        assert tables["models"][device_class] == stored
    assert tables["class_models"]["jax-cpu-x86"]["setup"]["softmax/eager"]["ms"] == 40.0
    # The call of three workloads was learned once, as the bmm it computed, taking 0.9 ms.
    assert any(op.kind == "bmm" and ms == 0.9 for op, _, ms, _ in expected["torch-cpu-x86"])
    assert [r[2] for r in expected["torch-cpu-x86"][3:5]] == [0.2, 0.55]
    assert [r[2] for r in walls["torch-cpu-x86"][3:5]] == [0.54, 0.55]


def test_global_copies_are_written_at_most_every_copy_period(monkeypatch) -> None:
    """The class's own table gets every batch's state; the copy deciders read is written at
    most every COPY_PERIOD_S, the newest state held meanwhile and written by the timer."""
    tables: dict[str, dict[str, Any]] = {"models": {}, "history": {}}
    for name, table in tables.items():
        monkeypatch.setattr(learn, name, table)
    monkeypatch.setattr(learn, "_copied_at", {})
    monkeypatch.setattr(learn, "_pending", {})
    clock = [100.0]
    monkeypatch.setattr(learn.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(learn, "event_context", lambda write: contextlib.nullcontext())
    period = learn.COPY_PERIOD_S
    event = SimpleNamespace(message=SimpleNamespace(partition=3))
    assert learn.copy_or_hold("cpu", event, {"version": 1}, {"version": 1})
    clock[0] += period / 4
    assert not learn.copy_or_hold("cpu", event, {"version": 2}, {"version": 2})
    assert not learn.copy_or_hold("cpu", event, {"version": 3}, {"version": 3})
    assert tables["models"]["cpu"] == {"version": 1}
    assert learn._pending["cpu"] == (3, {"version": 3}, {"version": 3})
    monkeypatch.setattr(learn, "_owned_metric_partitions", lambda: {3})
    learn.flush_due()
    assert tables["models"]["cpu"] == {"version": 1}  # not due yet: still held
    clock[0] += period
    learn.flush_due()
    assert tables["models"]["cpu"] == tables["history"]["cpu"] == {"version": 3}
    assert not learn._pending
    # a held copy of a partition this worker no longer owns is dropped, not written
    clock[0] += period / 4
    learn.copy_or_hold("cpu", event, {"version": 4}, {"version": 4})
    monkeypatch.setattr(learn, "_owned_metric_partitions", lambda: set())
    clock[0] += period * 2
    learn.flush_due()
    assert tables["models"]["cpu"] == {"version": 3} and not learn._pending
