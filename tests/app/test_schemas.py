"""The JSON Schemas shipped in app/schemas/: valid, in step with the wire records, and strict
enough to reject what the stages reject. Real messages are checked in
tests/integration/test_contract_messages.py."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from app.records import (
    DeadLetterRecord,
    HeartbeatRecord,
    MetricRecord,
    ResultRecord,
    RouteRecord,
    metric_batch_bytes,
    metric_columns_bytes,
    metric_rows,
)
from models.ops import SPEC_CLASSES, parse_op
from models.traces import synthetic_trace

SCHEMAS = Path(__file__).resolve().parents[2] / "app" / "schemas"
TOPICS = ("workloads", "routes", "metrics", "heartbeats", "results", "deadletter", "outcomes")
RECORDS = {"routes": RouteRecord, "metrics": MetricRecord, "heartbeats": HeartbeatRecord,
           "results": ResultRecord, "outcomes": ResultRecord, "deadletter": DeadLetterRecord}


def schema(topic: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{topic}.schema.json").read_text())


def record_schema(topic: str) -> dict[str, Any]:
    """The schema of one record of ``topic`` (the metrics topic's one execution, the outcomes
    topic's one outcome: not their batch forms)."""
    document = schema(topic)
    one = {"metrics": "metric", "outcomes": "outcome"}.get(topic)
    return document["$defs"][one] if one else document


def validator(topic: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(topic))


def valid(topic: str, message: dict[str, Any]) -> bool:
    return validator(topic).is_valid(message)


@pytest.mark.parametrize("topic", TOPICS)
def test_every_topic_has_a_valid_2020_12_schema(topic: str) -> None:
    document = schema(topic)
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$schema"].endswith("2020-12/schema")
    assert document["$id"].endswith(f"/{topic}.schema.json")
    assert record_schema(topic)["additionalProperties"] is False


@pytest.mark.parametrize("topic", sorted(RECORDS))
def test_schema_properties_match_the_wire_record(topic: str) -> None:
    record = RECORDS[topic]
    fields = record._options.fields  # every annotated field, defaults included
    document = record_schema(topic)
    assert set(document["properties"]) == set(fields)
    required_in_record = {name for name in fields if name not in record._options.defaults}
    assert set(document["required"]) == required_in_record


def test_route_embeds_exactly_the_workload_schema() -> None:
    workload = {k: v for k, v in schema("workloads").items()
                if k not in ("$schema", "$id", "title", "description", "$defs")}
    assert schema("routes")["$defs"]["workload"] == workload
    for name, definition in schema("workloads")["$defs"].items():
        assert schema("routes")["$defs"][name] == definition


def test_every_op_kind_has_a_definition_with_the_specs_fields() -> None:
    defs = schema("workloads")["$defs"]
    for kind, cls in SPEC_CLASSES.items():
        properties = defs[f"op_{kind}"]["properties"]
        assert set(properties) == {"kind"} | {f.name for f in dataclasses.fields(cls)}


def test_synthetic_workloads_validate() -> None:
    for workload in synthetic_trace(200, seed=3, precisions=("fp32", "bf16", "int8")):
        assert valid("workloads", workload), workload


def tensor(array: np.ndarray) -> dict[str, Any]:
    return {"dtype": str(array.dtype), "shape": list(array.shape),
            "data_b64": base64.b64encode(array.astype("<f4").tobytes()).decode()}


def test_a_workload_with_inline_inputs_validates() -> None:
    workload = {"id": "inline-1", "op": {"kind": "matmul", "m": 2, "k": 3, "n": 2},
                "precisions": ["fp32", "tf32"], "objective": {"latency": 1, "energy": 0.5},
                "deadline_ms": 10, "return_output": True,
                "inputs": {"a": tensor(np.ones((2, 3), np.float32)),
                           "b": tensor(np.ones((3, 2), np.float32))}}
    assert valid("workloads", workload)


BASE_WORKLOAD = {"id": "w1", "op": {"kind": "softmax", "rows": 4, "dim": 8}}


@pytest.mark.parametrize(("change", "why"), [
    ({"id": ""}, "empty id"),
    ({"id": "has space"}, "id outside the alphabet"),
    ({"op": {"kind": "fft", "n": 8}}, "unknown op kind"),
    ({"op": {"kind": "softmax", "rows": 0, "dim": 8}}, "zero dimension"),
    ({"op": {"kind": "softmax", "rows": 4, "dim": 8, "extra": 1}}, "unknown op field"),
    ({"op": {"kind": "softmax", "rows": 4}}, "missing op field"),
    ({"precisions": []}, "no precision"),
    ({"precisions": ["fp64"]}, "unknown precision"),
    ({"objective": "speed"}, "unknown objective"),
    ({"objective": {"latency": 1, "price": 1}}, "unknown objective weight"),
    ({"objective": {"cost": -1}}, "negative cost weight"),
    ({"deadline_ms": 0}, "zero deadline"),
    ({"deadline_ms": "soon"}, "malformed deadline"),
    ({"max_cost": -1}, "negative cost ceiling"),
    ({"pickle": "gASV"}, "unknown field"),
    ({"inputs": {"x": {"dtype": "int64", "shape": [4, 8], "data_b64": ""}}}, "bad dtype"),
])
def test_bad_workloads_are_rejected(change: dict[str, Any], why: str) -> None:
    assert valid("workloads", BASE_WORKLOAD)
    assert not valid("workloads", {**BASE_WORKLOAD, **change}), why


def route_record() -> dict[str, Any]:
    workload = synthetic_trace(1, seed=1)[0]
    return json.loads(RouteRecord(
        id=workload["id"], workload=workload, device_class="torch-cpu-x86",
        variant={"precision": "fp32", "mode": "eager"}, predicted_ms=1.5, predicted_std_ms=0.2,
        reason="explore", model_version=3, decided_at_ms=1_800_000_000_000,
    ).dumps())


def result_record(**change: Any) -> dict[str, Any]:
    base = ResultRecord(id="w1", status="ok", device_id="host-torch-cpu-1",
                        device_class="torch-cpu-x86", variant={"precision": "fp32",
                                                               "mode": "eager"},
                        latency_ms=0.5, queue_ms=2.0, checksum="sha256:" + "0" * 64)
    return {**json.loads(base.dumps()), **change}


def test_records_as_the_stages_write_them_validate() -> None:
    assert valid("routes", route_record())
    assert valid("results", result_record())
    assert valid("outcomes", result_record(status="error", checksum=None, error="boom"))
    op = parse_op({"kind": "matmul", "m": 8, "k": 8, "n": 8})
    metric = json.loads(MetricRecord(
        workload_id="w1", device_id="d1", device_class="numpy-cpu-x86", runtime="numpy",
        op=op.to_dict(), variant={"precision": "fp32", "mode": "eager"}, flops=op.flops(),
        bytes_moved=op.bytes_moved("fp32"), status="ok", queue_ms=0.0, exec_ms=0.1,
        started_at_ms=1, finished_at_ms=2).dumps())
    assert valid("metrics", metric)
    batch = json.loads(metric_batch_bytes([json.dumps(metric).encode()] * 3))
    assert batch == {"version": 2, "metrics": [metric] * 3} and valid("metrics", batch)
    assert not valid("metrics", {"version": 3, "metrics": [metric]})
    # The columnar form (version 3), as executors publish it: valid, and its rows are.
    rows = [{**metric, "workload_id": f"w{i}", "exec_ms": 0.1 * i} for i in range(3)]
    columns = json.loads(metric_columns_bytes([json.dumps(r).encode() for r in rows]))
    assert columns["version"] == 3 and valid("metrics", columns)
    assert all(valid("metrics", r) for r in metric_rows(columns))
    assert not valid("metrics", {**columns, "rows": 0})
    assert not valid("metrics", {**columns, "columns": {"exec_ms": {"values": [1.0]}}})
    assert not valid("metrics", {"version": 2, "metrics": [{**metric, "exec_ms": "1"}]})
    # A workload of a batched call (dynamic batching): its share, the call's time and size.
    assert metric["batch_size"] == 1 and metric["batch_exec_ms"] is None
    batched = {**metric, "exec_ms": 0.05, "batch_exec_ms": 0.2, "batch_size": 4}
    assert valid("metrics", batched) and valid("metrics", {"version": 2, "metrics": [batched]})
    assert not valid("metrics", {**batched, "batch_size": 0})
    assert valid("outcomes", result_record(batch_size=4)) and valid("results", result_record())
    assert not valid("results", result_record(batch_size=0))
    heartbeat = json.loads(HeartbeatRecord(
        device_id="d1", device_class="numpy-cpu-x86", runtime="numpy", device="cpu",
        capabilities=[["matmul", "fp32", "eager"]], queue_depth=0, sent_at_ms=5,
        started_at_ms=1).dumps())
    assert valid("heartbeats", heartbeat)
    dead = json.loads(DeadLetterRecord(topic="t", partition=0, offset=7, reason="not JSON",
                                       raw_b64="eA==", stage="decide", rejected_at_ms=1).dumps())
    assert valid("deadletter", dead)


@pytest.mark.parametrize(("topic", "message"), [
    ("results", result_record(status="maybe")),
    ("results", result_record(checksum="md5:abc")),
    ("results", result_record(latency_ms=-1)),
    ("results", {k: v for k, v in result_record().items() if k != "device_id"}),
    ("routes", {**route_record(), "reason": "guess"}),
    ("routes", {**route_record(), "device_class": "Torch CPU"}),
])
def test_bad_records_are_rejected(topic: str, message: dict[str, Any]) -> None:
    assert not valid(topic, message)


def test_route_with_a_workload_the_decider_would_reject_is_invalid() -> None:
    route = route_record()
    broken = copy.deepcopy(route)
    broken["workload"]["op"]["kind"] = "fft"
    assert valid("routes", route) and not valid("routes", broken)


SCHEMA_KINDS = {"string": "string", "integer": "integer", "number": "number",
                "boolean": "boolean", "object": "object", "array": "list"}


def _schema_kind(spec: dict[str, Any]) -> str | None:
    if "type" in spec:
        return SCHEMA_KINDS.get(spec["type"]) if isinstance(spec["type"], str) else None
    kinds = [s for s in spec.get("anyOf", []) if s.get("type") != "null"]
    return _schema_kind(kinds[0]) if len(kinds) == 1 else None


@pytest.mark.parametrize("topic", ["heartbeats", "metrics", "outcomes"])
def test_the_stages_check_what_the_record_and_its_schema_require(topic: str) -> None:
    """One field list per wire record: the parser's (app.records.wire_fields), the record's
    and the JSON Schema's required fields and kinds agree (the heartbeat parser once took
    queue_depth, sent_at_ms and started_at_ms as optional while both required them)."""
    from app.records import wire_fields

    required, optional = wire_fields(RECORDS[topic])
    spec = record_schema(topic)
    assert set(required) == set(spec["required"])
    for name, kind in {**required, **optional}.items():
        expected = _schema_kind(spec["properties"][name])
        if expected is not None:
            assert kind == expected, (topic, name, kind, expected)


def test_a_heartbeat_without_its_queue_depth_is_refused() -> None:
    from agents.registry import parse_heartbeat

    beat = {"device_id": "sim-h100-0", "device_class": "sim-h100", "runtime": "sim",
            "device": "h100", "capabilities": [["fp32", "eager"]], "queue_depth": 0,
            "sent_at_ms": 1, "started_at_ms": 1}
    assert parse_heartbeat(json.dumps(beat).encode()).queue_depth == 0
    del beat["queue_depth"]
    with pytest.raises(ValueError, match="lacks queue_depth"):
        parse_heartbeat(json.dumps(beat).encode())


def test_a_heartbeat_with_a_malformed_calibration_is_refused() -> None:
    """The registry refuses what the prior would be built from: unknown precisions and rates
    that are not positive numbers (the schema says the same)."""
    from agents.registry import parse_heartbeat

    beat = {"device_id": "d", "device_class": "torch-cpu-x86", "runtime": "torch",
            "device": "cpu", "capabilities": [["matmul", "fp32", "eager"]], "queue_depth": 0,
            "sent_at_ms": 1, "started_at_ms": 1, "calibration": {"fp32": 59.7, "bf16": 1.4}}
    assert parse_heartbeat(json.dumps(beat).encode()).calibration == {"fp32": 59.7, "bf16": 1.4}
    assert valid("heartbeats", beat)
    for bad in ({"fp32": -1.0}, {"fp64": 1.0}, ["fp32"]):
        beat["calibration"] = bad
        with pytest.raises(ValueError, match="calibration"):
            parse_heartbeat(json.dumps(beat).encode())
        assert not valid("heartbeats", beat)
    beat["calibration"] = None
    kernels = {"softmax:rows=2048,dim=2048,dtype=float32": {"fp32": 21.3, "bf16": 9.0}}
    beat["kernel_ms"] = kernels
    assert parse_heartbeat(json.dumps(beat).encode()).kernel_ms == kernels
    assert valid("heartbeats", beat)
    for bad in ({"softmax": {"fp32": 0.0}}, {"softmax": {"fp64": 1.0}}, {"softmax": 2.0}):
        beat["kernel_ms"] = bad
        with pytest.raises(ValueError, match="kernel_ms"):
            parse_heartbeat(json.dumps(beat).encode())
        assert not valid("heartbeats", beat)


def _metric(**change: Any) -> dict[str, Any]:
    row = {"workload_id": "w1", "device_id": "d1", "device_class": "numpy-cpu-x86",
           "runtime": "numpy", "op": {"kind": "matmul", "m": 8, "k": 8, "n": 8},
           "variant": {"precision": "fp32", "mode": "eager"}, "flops": 1024.0,
           "bytes_moved": 768.0, "status": "ok", "queue_ms": 0.0, "exec_ms": 0.1,
           "started_at_ms": 1, "finished_at_ms": 2}
    return {**row, **change}


def test_rows_without_the_batch_fields_read_as_unbatched() -> None:
    """Rows of executors from before dynamic batching parse with batch size 1."""
    from agents.complete import parse_outcomes
    from agents.learn import parse_metric

    row = parse_metric(json.dumps(_metric()).encode())
    assert row.batch_size == 1 and row.batch_exec_ms is None
    batched = parse_metric(json.dumps(_metric(batch_size=3, batch_exec_ms=0.3)).encode())
    assert batched.batch_size == 3 and batched.batch_exec_ms == 0.3
    outcome = {k: v for k, v in result_record().items() if k != "batch_size"}
    assert parse_outcomes(json.dumps(outcome).encode())[0][0].batch_size == 1


def test_a_metric_batch_is_parsed_row_by_row_and_a_bad_row_is_refused_alone() -> None:
    """The metrics topic's two forms read the same (app.records.metric_rows); in a batch, a
    refused row names its place and the others are kept."""
    from agents.learn import parse_metric, parse_metrics
    from app.records import metric_rows

    one = json.dumps(_metric()).encode()
    assert parse_metric(one).workload_id == "w1"
    rows = [_metric(workload_id=f"w{i}") for i in range(3)]
    rows[1]["exec_ms"] = -1.0
    good, bad = parse_metrics(json.dumps({"version": 2, "metrics": rows}).encode())
    assert [m.workload_id for m in good] == ["w0", "w2"]
    assert [(i, row["workload_id"]) for i, row, _ in bad] == [(1, "w1")]
    assert "metric 1 of a batch of 3" in bad[0][2] and "exec_ms" in bad[0][2]
    assert metric_rows({"version": 2, "metrics": rows}) == rows
    assert metric_rows(_metric()) == [_metric()]
    for refused, reason in (({"version": 9, "metrics": rows}, "version 9"),
                            ({"version": 3, "metrics": rows}, "columnar metric batch is"),
                            ({"version": 2, "metrics": {}}, "nothing else"),
                            ({"version": 2, "metrics": rows, "x": 1}, "nothing else")):
        with pytest.raises(ValueError, match=reason):
            parse_metrics(json.dumps(refused).encode())
    with pytest.raises(ValueError, match="holds 3"):
        parse_metric(json.dumps({"version": 2, "metrics": [_metric()] * 3}).encode())


def test_offload_fields_validate_and_bad_ones_are_refused() -> None:
    """Requests with a cost objective and ceiling, routes that say why their class won,
    metrics with a measured transfer and modelled energy, heartbeats with a link and a price
    (issue 14); and what the schemas and the stages refuse."""
    from agents.registry import parse_heartbeat
    from models.decision import Candidate
    from models.ops import Variant
    from models.policy import make_policy
    from models.routing import route_fields
    from models.workload import parse_workload

    for objective in ("cost", {"latency": 1, "cost": 2}, {"energy": 1, "cost": 1}):
        assert valid("workloads", {**BASE_WORKLOAD, "objective": objective, "max_cost": 0.5,
                                   "deadline_ms": 25})
    raw = {**BASE_WORKLOAD, "objective": {"latency": 1, "cost": 1}, "max_cost": 1.0}
    workload = parse_workload(raw)
    offered = [Candidate("torch-cpu-x86", Variant("fp32")),
               Candidate("sim-h100", Variant("fp32"), transfer_ms=12.0, price_per_hour=4.0)]
    decision = make_policy("switchyard").decide(workload, offered, {}, None,
                                                np.random.default_rng(0))
    route = json.loads(RouteRecord(**route_fields(workload, decision, "switchyard", 1,
                                                  1_800_000_000_000)).dumps())
    assert valid("routes", route), route
    assert {c["device_class"] for c in route["compared"]} == {"torch-cpu-x86", "sim-h100"}
    assert not valid("routes", {**route, "predicted_transfer_ms": -1})
    metric = _metric(transfer_ms=41.5, transfer_bytes=12_000_000, link_simulated=True,
                     energy_j=0.3, energy_simulated=True, simulated=True)
    assert valid("metrics", metric)
    assert not valid("metrics", _metric(transfer_bytes=-1))
    assert valid("results", result_record(transfer_ms=41.5, energy_simulated=True))
    beat = {"device_id": "sim-h100-0", "device_class": "sim-h100", "runtime": "sim",
            "device": "h100", "capabilities": [["matmul", "fp32", "eager"]], "queue_depth": 0,
            "sent_at_ms": 1, "started_at_ms": 1, "link": {"rtt_ms": 20, "bandwidth_mbit_s": 100},
            "price_per_hour": 4.0, "power_model": "h100"}
    assert valid("heartbeats", beat)
    assert parse_heartbeat(json.dumps(beat).encode()).link == {"rtt_ms": 20,
                                                               "bandwidth_mbit_s": 100}
    for change, reason in (({"link": {"rtt_ms": 20, "bandwidth_mbit_s": -5}}, "bandwidth"),
                           ({"link": {"rtt_ms": 20, "bandwidth_mbit_s": 0}}, "bandwidth"),
                           ({"link": {"rtt_ms": -1, "bandwidth_mbit_s": 5}}, "rtt_ms"),
                           ({"link": {"rtt_ms": 1}}, "link must be"),
                           ({"price_per_hour": -2}, "price_per_hour")):
        assert not valid("heartbeats", {**beat, **change}), change
        with pytest.raises(ValueError, match=reason):
            parse_heartbeat(json.dumps({**beat, **change}).encode())


def test_an_outcome_batch_is_parsed_outcome_by_outcome_and_a_bad_one_is_refused_alone() -> None:
    """The outcomes topic's batch form (app.records.outcome_batch_bytes) validates against the
    schema and reads as its outcomes; a refused outcome names its place and keeps its own
    bytes, the others complete; a batch of the wrong structure is refused whole."""
    from agents.complete import parse_outcomes
    from app.records import outcome_batch_bytes

    ones = [result_record(id=f"w{i}") for i in range(3)]
    lone = outcome_batch_bytes([json.dumps(ones[0]).encode()])
    assert json.loads(lone) == ones[0]  # a lone outcome is published in the one-outcome form
    value = outcome_batch_bytes([json.dumps(o).encode() for o in ones])
    batch = json.loads(value)
    assert batch == {"version": 2, "outcomes": ones} and valid("outcomes", batch)
    good, refused = parse_outcomes(value)
    assert [o.id for o in good] == ["w0", "w1", "w2"] and refused == []
    assert [o.id for o in parse_outcomes(lone)[0]] == ["w0"]

    bad = {**ones[1], "latency_ms": "slow"}
    mixed = {"version": 2, "outcomes": [ones[0], bad, 7, ones[2]]}
    assert not valid("outcomes", mixed)
    good, refused = parse_outcomes(json.dumps(mixed).encode())
    assert [o.id for o in good] == ["w0", "w2"]
    assert [reason.split(":")[0] for reason, _ in refused] == [
        "outcome 2 of 4 in a batch", "outcome 3 of 4 in a batch"]
    assert "latency_ms must be a number" in refused[0][0]
    assert json.loads(refused[0][1]) == bad and refused[1][1] == b"7"
    for whole in ({"version": 3, "outcomes": ones}, {"version": 2, "outcomes": []},
                  {"version": 2, "outcomes": ones, "extra": 1}, {"version": 2}):
        assert not valid("outcomes", whole)
        with pytest.raises(ValueError, match="outcome batch"):
            parse_outcomes(json.dumps(whole).encode())


@pytest.mark.parametrize("extra", [
    {},
    {"predicted_energy_j": 3.25, "objective": {"latency": 0.5, "energy": 0.5}, "probe": True},
    {"predicted_ms": 1e16, "predicted_std_ms": 1e-7, "compared": [{"device_class": "x",
                                                                   "score": float("inf")}]},
])
def test_wire_bytes_are_the_records_own_dumps_byte_for_byte(extra: dict[str, Any]) -> None:
    """The decide stage sends ``wire_bytes(RouteRecord, fields)`` instead of building the
    record: the same bytes, defaults included, in the declared order."""
    from app.records import wire_bytes

    fields = {"id": "w1", "workload": {"id": "w1", "op": {"kind": "matmul", "m": 4, "k": 4,
                                                          "n": 4}},
              "device_class": "sim-h100", "variant": {"precision": "bf16", "mode": "eager"},
              "predicted_ms": 1.5, "predicted_std_ms": 0.25, "reason": "exploit",
              "model_version": 3, "decided_at_ms": 1_700_000_000_123, **extra}
    assert wire_bytes(RouteRecord, fields) == RouteRecord(**fields).dumps()
    assert list(json.loads(wire_bytes(RouteRecord, fields))) == list(
        RouteRecord._options.fields)
    with pytest.raises(KeyError):
        wire_bytes(RouteRecord, {k: v for k, v in fields.items() if k != "reason"})


@pytest.mark.parametrize("runtime_name,device", [("numpy", "cpu"), ("sim", "h100")])
def test_an_executors_outcome_and_metric_wire_bytes_are_the_records_dumps(
        runtime_name: str, device: str) -> None:
    """Executors publish ``wire_bytes`` of what ``perform`` returns (not Faust records built
    and dumped): the same bytes for a checked result, a bf16 one, one with its output inline
    and a workload that failed."""
    from app.records import MetricRecord, ResultRecord, wire_bytes
    from models.workload import WorkloadLimits
    from runtimes import get_runtime
    from runtimes.work import perform

    runtime = get_runtime(runtime_name, device, threads=1)
    op = {"kind": "matmul", "m": 3, "k": 4, "n": 5}
    routes = [{"id": f"w{i}", "workload": {"id": f"w{i}", "op": op, "precisions": [precision],
                                           **extra},
               "device_class": "x", "variant": {"precision": precision, "mode": "eager"},
               "predicted_ms": 2.0, "decided_at_ms": 1000, "attempt": 2}
              for i, (precision, extra) in enumerate([
                  ("fp32", {"seed": 4, "return_output": True}), ("bf16", {}), ("fp32", {})])]
    routes.append({"id": "bad", "workload": {"id": "bad", "op": {"kind": "nope"}}})
    try:
        for route in routes:
            result = perform(route, runtime, device_id="d", limits=WorkloadLimits())
            assert set(result.metric) <= set(MetricRecord._options.fields)
            assert set(result.outcome) <= set(ResultRecord._options.fields)
            assert (wire_bytes(MetricRecord, result.metric)
                    == MetricRecord.from_data(result.metric).dumps())
            assert (wire_bytes(ResultRecord, result.outcome)
                    == ResultRecord.from_data(result.outcome).dumps())
        assert json.loads(wire_bytes(ResultRecord, result.outcome))["status"] == "error"
    finally:
        runtime.close()
