"""Hostile messages for every input topic of the worker, drawn with hypothesis.

Each message is built to be *invalid* for its topic, so the system must dead-letter every one:
random bytes, text that is not UTF-8 or not JSON, JSON of the wrong type, valid-looking records
with a required field missing or of the wrong type, non-finite numbers, huge, negative and zero
dimensions, deep nesting, unknown op kinds and fields, oversized and inconsistent inline
tensors, pickles and code. The same seed gives the same messages.
"""

from __future__ import annotations

import base64
import json
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

# Kafka's default max.message.bytes is 1 MiB: the largest hostile value stays under it, so the
# broker accepts it and the worker has to cope.
MAX_HOSTILE_BYTES = 900_000

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
NOT_STRING = JSON_VALUES.filter(lambda v: not isinstance(v, str))
NOT_NUMBER = JSON_VALUES.filter(lambda v: isinstance(v, bool) or not isinstance(v, int | float))
NOT_OBJECT = JSON_VALUES.filter(lambda v: not isinstance(v, dict))
NON_FINITE = st.sampled_from(["NaN", "Infinity", "-Infinity"])


@dataclass(frozen=True)
class Hostile:
    """One hostile message: the input topic it goes to (by contract name), key, raw value."""

    topic: str  # "workloads" | "metrics" | "heartbeats" | "outcomes"
    key: str
    value: bytes
    category: str


def draw_many(strategy: st.SearchStrategy[Any], count: int, seed: int) -> list[Any]:
    """``count`` examples of ``strategy``, reproducibly (hypothesis as a generator)."""
    out: list[Any] = []

    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        out.append(data.draw(strategy))

    collect._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
    collect()
    return (out * (1 + count // max(1, len(out))))[:count]


# --- valid templates, to mutate --------------------------------------------------------------
def valid_workload(workload_id: str) -> dict[str, Any]:
    return {"id": workload_id, "op": {"kind": "matmul", "m": 8, "k": 8, "n": 8,
                                      "dtype": "float32"}, "precisions": ["fp32"]}


def valid_metric() -> dict[str, Any]:
    return {"workload_id": "fz-m", "device_id": "fz-dev", "device_class": "sim-fuzz",
            "runtime": "sim", "op": {"kind": "matmul", "m": 8, "k": 8, "n": 8,
                                     "dtype": "float32"},
            "variant": {"precision": "fp32", "mode": "eager"}, "flops": 1024.0,
            "bytes_moved": 768.0, "status": "ok", "queue_ms": 0.1, "exec_ms": 0.2,
            "started_at_ms": 1, "finished_at_ms": 2}


def valid_heartbeat() -> dict[str, Any]:
    return {"device_id": "fz-dev", "device_class": "sim-fuzz", "runtime": "sim",
            "device": "fuzz", "capabilities": [["matmul", "fp32", "eager"]], "queue_depth": 0,
            "sent_at_ms": 1, "started_at_ms": 1}


def valid_outcome() -> dict[str, Any]:
    return {"id": "fz-o", "status": "ok", "device_id": "fz-dev", "device_class": "sim-fuzz",
            "variant": {"precision": "fp32", "mode": "eager"}, "latency_ms": 0.2,
            "queue_ms": 0.1}


# Required fields and the kind of value each must hold; a wrong kind must be rejected.
FIELDS: dict[str, dict[str, str]] = {
    "metrics": {"workload_id": "str", "device_id": "str", "device_class": "str", "op": "obj",
                "variant": "obj", "status": "str", "exec_ms": "num"},
    "heartbeats": {"device_id": "str", "device_class": "str", "runtime": "str",
                   "device": "str", "capabilities": "list"},
    "outcomes": {"id": "str", "status": "str", "device_id": "str", "device_class": "str",
                 "variant": "obj", "latency_ms": "num", "queue_ms": "num"},
}
# Optional fields a stage computes with: null is allowed, a wrong kind is not.
OPTIONAL: dict[str, dict[str, str]] = {
    "metrics": {"energy_j": "num", "queue_ms": "num"},
    "heartbeats": {"queue_depth": "num", "in_hand": "num", "power_w": "num"},
    "outcomes": {"energy_j": "num", "attempt": "num"},
}
BAD_CLASS_NAMES = st.sampled_from(["", "nodash", "UPPER-case", "../../x-y", "a b-c", "x" * 300,
                                   "sim-h100;rm -rf", "-lead-dash"])
TEMPLATES: dict[str, Callable[[], dict[str, Any]]] = {
    "metrics": valid_metric, "heartbeats": valid_heartbeat, "outcomes": valid_outcome}
WRONG = {"str": NOT_STRING, "num": NOT_NUMBER, "obj": NOT_OBJECT,
         "list": JSON_VALUES.filter(lambda v: not isinstance(v, list))}


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()


@st.composite
def record_mutation(draw: st.DrawFn, topic: str) -> tuple[str, bytes]:
    """A record of ``topic`` with one required field missing, mistyped or non-finite."""
    record = TEMPLATES[topic]()
    how = draw(st.sampled_from(["missing", "wrong type", "non-finite", "optional wrong type",
                                "bad class name"]))
    if how == "bad class name" and topic == "heartbeats":
        record["device_class"] = draw(BAD_CLASS_NAMES)
        return f"{topic}: device_class not topic-safe", _encode(record)
    if how == "optional wrong type":
        field = draw(st.sampled_from(sorted(OPTIONAL[topic])))
        record[field] = draw(NOT_NUMBER.filter(lambda v: v is not None))
        return f"{topic}: optional {field} of the wrong type", _encode(record)
    field = draw(st.sampled_from(sorted(FIELDS[topic])))
    if how not in ("missing", "wrong type") and FIELDS[topic][field] != "num":
        how = "wrong type"
    if how == "missing":
        del record[field]
        return f"{topic}: missing {field}", _encode(record)
    if how == "non-finite":
        marker = "__NONFINITE__"
        record[field] = marker
        text = _encode(record).decode().replace(f'"{marker}"', draw(NON_FINITE))
        return f"{topic}: non-finite {field}", text.encode()
    record[field] = draw(WRONG[FIELDS[topic][field]])
    return f"{topic}: {field} of the wrong type", _encode(record)


@st.composite
def raw_garbage(draw: st.DrawFn) -> tuple[str, bytes]:
    """Bytes that are not a JSON object at all."""
    kind = draw(st.sampled_from(["random bytes", "not utf-8", "not json", "json not object",
                                 "deep nesting", "pickle", "empty"]))
    if kind == "random bytes":
        return kind, draw(st.binary(min_size=1, max_size=512))
    if kind == "not utf-8":
        return kind, b"\xff\xfe" + draw(st.binary(max_size=64))
    if kind == "not json":
        return kind, ("{" + draw(st.text(max_size=64))).encode()
    if kind == "json not object":
        return kind, _encode(draw(NOT_OBJECT))
    if kind == "deep nesting":
        depth = draw(st.sampled_from([100, 5_000, MAX_HOSTILE_BYTES // 2]))
        opener = draw(st.sampled_from(["[", '{"a":']))
        return kind, (opener * depth).encode()[:MAX_HOSTILE_BYTES]
    if kind == "pickle":
        return kind, pickle.dumps({"op": "matmul", "exec": "__import__('os').system('id')"})
    return kind, b""


def _tensor(shape: list[int], dtype: str = "float32", elements: int | None = None,
            fill: float = 1.0) -> dict[str, Any]:
    import numpy as np

    count = math.prod(shape) if elements is None else elements
    raw = np.full(count, fill, dtype=dtype).tobytes()
    return {"dtype": dtype, "shape": shape, "data_b64": base64.b64encode(raw).decode()}


@st.composite
def bad_workload(draw: st.DrawFn, workload_id: str) -> tuple[str, bytes]:
    """A workload that looks like one but breaks a rule of the contract."""
    w = valid_workload(workload_id)
    kind = draw(st.sampled_from([
        "huge dims", "negative dims", "zero dims", "non-integer dims", "unknown op kind",
        "unknown field", "id of the wrong type", "bad id", "precisions of the wrong type",
        "unknown precision", "non-finite deadline", "oversized inline tensor",
        "inline shape inconsistent", "inline data length wrong", "inline NaN",
        "inline dtype mismatch", "code instead of op", "op of the wrong type"]))
    op = w["op"]
    if kind == "huge dims":
        op.update(m=draw(st.integers(2**31, 2**80)), k=2**20, n=2**20)
    elif kind == "negative dims":
        op["k"] = draw(st.integers(max_value=-1))
    elif kind == "zero dims":
        op["n"] = 0
    elif kind == "non-integer dims":
        op["m"] = draw(st.sampled_from([8.5, "8", True, None, [8], 1e300]))
    elif kind == "unknown op kind":
        op["kind"] = draw(st.text(max_size=20).filter(lambda k: k not in (
            "matmul", "bmm", "linear", "conv2d", "attention", "layernorm", "softmax", "mlp")))
    elif kind == "unknown field":
        w[draw(st.sampled_from(["__reduce__", "code", "pickle", "exec", "callback"]))] = "x"
    elif kind == "id of the wrong type":
        w["id"] = draw(NOT_STRING)
    elif kind == "bad id":
        w["id"] = draw(st.sampled_from(["", "a" * 500, "../../etc/passwd", "id with space"]))
    elif kind == "precisions of the wrong type":
        w["precisions"] = draw(st.sampled_from(["fp32", 32, {"fp32": 1}, [], [None]]))
    elif kind == "unknown precision":
        w["precisions"] = ["fp64"]
    elif kind == "non-finite deadline":
        text = _encode({**w, "deadline_ms": "__X__"}).decode()
        return kind, text.replace('"__X__"', draw(NON_FINITE)).encode()
    elif kind == "oversized inline tensor":
        op.update(m=1024, k=1024, n=1024)  # 2 Mi inline elements, over the 1 Mi cap
        w["inputs"] = {"a": _tensor([1, 1]), "b": _tensor([1, 1])}
        w["inputs"]["a"]["shape"] = [1024, 1024]
    elif kind == "inline shape inconsistent":
        w["inputs"] = {"a": _tensor([8, 4]), "b": _tensor([8, 8])}
    elif kind == "inline data length wrong":
        w["inputs"] = {"a": _tensor([8, 8], elements=63), "b": _tensor([8, 8])}
    elif kind == "inline NaN":
        w["inputs"] = {"a": _tensor([8, 8], fill=math.nan), "b": _tensor([8, 8])}
    elif kind == "inline dtype mismatch":
        w["inputs"] = {"a": _tensor([8, 8], "float64"), "b": _tensor([8, 8], "float64")}
    elif kind == "code instead of op":
        w["op"] = "__import__('os').system('id')"
    else:
        w["op"] = draw(NOT_OBJECT)
    return f"workloads: {kind}", _encode(w)


def hostile_messages(count: int, seed: int = 0) -> list[Hostile]:
    """``count`` hostile messages spread over the four input topics."""
    per = max(1, count // 8)
    out: list[Hostile] = []
    for i, (category, raw) in enumerate(draw_many(raw_garbage(), per * 4, seed)):
        topic = ("workloads", "metrics", "heartbeats", "outcomes")[i % 4]
        out.append(Hostile(topic, f"fz-g{i}", raw, f"{topic}: {category}"))
    bad = draw_many(st.integers(0, 10**9).flatmap(lambda n: bad_workload(f"fz-w{n}")),
                    per * 2, seed + 1)
    out += [Hostile("workloads", f"fz-w{i}", raw, cat) for i, (cat, raw) in enumerate(bad)]
    for j, topic in enumerate(("metrics", "heartbeats", "outcomes")):
        mutations = draw_many(record_mutation(topic), max(1, (count - len(out)) // (3 - j)),
                              seed + 2 + j)
        out += [Hostile(topic, f"fz-{topic[0]}{i}", raw, cat)
                for i, (cat, raw) in enumerate(mutations)]
    return out[:count]
