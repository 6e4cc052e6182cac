"""Workload validation and bounded JSON decoding."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ops import SpecError, make_inputs, parse_op
from models.tensors import encode_tensor
from models.workload import (
    WorkloadLimits,
    decode_json_bounded,
    default_seed,
    parse_objective,
    parse_workload,
)

OP = {"kind": "matmul", "m": 2, "k": 3, "n": 4}


def test_minimal_workload_gets_the_contract_defaults() -> None:
    w = parse_workload({"id": "w-1", "op": OP})
    assert w.precisions == ("fp32",)
    assert w.objective == {"latency": 1.0, "energy": 0.0}
    assert w.seed == default_seed("w-1") and 0 <= w.seed < 2**63
    assert w.deadline_ms is None and w.inputs is None and not w.return_output
    assert w.op == parse_op(OP)
    assert w.raw == {"id": "w-1", "op": OP}


def test_full_workload() -> None:
    spec = parse_op(OP)
    arrays = make_inputs(spec, 3)
    raw = {
        "id": "job:42.a_b",
        "op": OP,
        "precisions": ["bf16", "fp32", "bf16"],
        "deadline_ms": 12.5,
        "objective": {"latency": 3, "energy": 1},
        "seed": 7,
        "inputs": {k: encode_tensor(v) for k, v in arrays.items()},
        "return_output": True,
        "submitted_at_ms": 1_700_000_000_000,
    }
    w = parse_workload(json.loads(json.dumps(raw)))
    assert w.precisions == ("bf16", "fp32")  # order kept, duplicates dropped
    assert w.objective == {"latency": 0.75, "energy": 0.25}
    assert w.seed == 7 and w.deadline_ms == 12.5 and w.return_output
    assert w.inputs is not None
    assert all(np.array_equal(w.inputs[k], arrays[k]) for k in arrays)
    assert "inputs" not in repr(w) and "data_b64" not in repr(w)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"id": ""}, "non-empty string"),
        ({"id": 5}, "non-empty string"),
        ({"id": "a" * 129}, "over the limit 128"),
        ({"id": "has space"}, "letters, digits"),
        ({"id": "-leading"}, "letters, digits"),
        ({"id": "é"}, "letters, digits"),
        ({"op": {"kind": "nope"}}, "unknown op kind"),
        ({"precisions": []}, "non-empty list"),
        ({"precisions": "fp32"}, "non-empty list"),
        ({"precisions": ["fp64"]}, "unknown precision"),
        (
            {"op": {"kind": "softmax", "rows": 2, "dim": 2}, "precisions": ["int8"]},
            "not defined for softmax",
        ),
        ({"deadline_ms": 0}, "> 0"),
        ({"deadline_ms": -5}, "> 0"),
        ({"deadline_ms": True}, "finite number"),
        ({"deadline_ms": "5"}, "finite number"),
        ({"objective": "speed"}, "objective must be"),
        ({"objective": {"latency": 0, "energy": 0}}, "all be zero"),
        ({"objective": {"latency": -1}}, ">= 0"),
        ({"objective": {"speed": 1}}, "objective must be"),
        ({"objective": "cheapest"}, "objective must be"),
        ({"objective": {"cost": -1}}, ">= 0"),
        ({"max_cost": -0.5}, "max_cost must be >= 0"),
        ({"max_cost": "1"}, "finite number"),
        ({"deadline_ms": [5]}, "finite number"),
        ({"deadline_ms": float("inf")}, "finite number"),
        ({"seed": -1}, "seed must be"),
        ({"seed": 2**63}, "seed must be"),
        ({"seed": 1.5}, "seed must be"),
        ({"return_output": "yes"}, "true or false"),
        ({"submitted_at_ms": -1}, ">= 0"),
        ({"inputs": {"a": "x"}}, "exactly the op's inputs: a, b"),
        ({"priority": 1}, "unknown field"),
    ],
)
def test_bad_workloads_are_refused_with_a_reason(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_workload({"id": "w", "op": OP, **patch})


def test_missing_op_and_non_object() -> None:
    with pytest.raises(SpecError, match="missing op"):
        parse_workload({"id": "w"})
    with pytest.raises(SpecError, match="JSON object"):
        parse_workload([1, 2])


def _inline(**arrays: np.ndarray) -> dict[str, Any]:
    return {"id": "w", "op": OP, "inputs": {k: encode_tensor(v) for k, v in arrays.items()}}


def test_inline_inputs_must_match_the_op() -> None:
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    with pytest.raises(SpecError, match="input b has shape"):
        parse_workload(_inline(a=a, b=np.ones((4, 3), np.float32)))
    with pytest.raises(SpecError, match="op's dtype is float32"):
        parse_workload(_inline(a=a, b=b.astype(np.float64)))
    with pytest.raises(SpecError, match="input a: .*NaN"):
        parse_workload(_inline(a=np.full((2, 3), np.nan, np.float32), b=b))
    # The inline cap covers all tensors together (6 + 12 = 18 elements).
    assert parse_workload(_inline(a=a, b=b), WorkloadLimits(max_inline_elements=18)).inputs
    with pytest.raises(SpecError, match="inline inputs hold 18 elements, over the limit 17"):
        parse_workload(_inline(a=a, b=b), WorkloadLimits(max_inline_elements=17))


def test_op_size_limit_comes_from_the_limits() -> None:
    with pytest.raises(SpecError, match="over the limit 10"):
        parse_workload({"id": "w", "op": OP}, WorkloadLimits(max_elements=10))


def test_objective_shorthands() -> None:
    assert parse_objective("energy") == {"latency": 0.0, "energy": 1.0}
    assert parse_objective({"energy": 2}) == {"latency": 0.0, "energy": 1.0}
    assert parse_objective("cost") == {"latency": 0.0, "energy": 0.0, "cost": 1.0}
    assert parse_objective({"latency": 1, "cost": 3}) == {"latency": 0.25, "energy": 0.0,
                                                          "cost": 0.75}


def test_max_cost_is_parsed_and_zero_allowed() -> None:
    assert parse_workload({"id": "w", "op": OP, "max_cost": 0.25}).max_cost == 0.25
    assert parse_workload({"id": "w", "op": OP, "max_cost": 0}).max_cost == 0.0
    assert parse_workload({"id": "w", "op": OP}).max_cost is None


def test_decode_json_bounded() -> None:
    assert decode_json_bounded(b'{"a": [1, {"b": "[[[["}]}', 100, 3) == {"a": [1, {"b": "[[[["}]}
    assert decode_json_bounded(b'"\\"[[[["', 100, 1) == '"[[[['  # escaped quote inside a string
    with pytest.raises(SpecError, match="nests 4 deep"):
        decode_json_bounded(b"[[[[1]]]]", 100, 3)
    with pytest.raises(SpecError, match="over the limit 4"):
        decode_json_bounded(b"12345", 4, 3)
    with pytest.raises(SpecError, match="not UTF-8"):
        decode_json_bounded(b"\xff\xfe", 100, 3)
    for bad in (b"{", b"", b"nope", b"[NaN]", b"[Infinity]", b'{"a": 1} x'):
        with pytest.raises(SpecError, match="not JSON"):
            decode_json_bounded(bad, 100, 3)


def test_hostile_nesting_is_refused_without_recursion() -> None:
    hostile = b"[" * 5_000_000  # would blow the C stack or raise RecursionError if parsed
    with pytest.raises(SpecError, match="nests 5000000 deep"):
        decode_json_bounded(hostile, 8 * 2**20, 32)
    deep_in_string = json.dumps({"id": "[" * 100_000}).encode()
    assert decode_json_bounded(deep_in_string, 8 * 2**20, 2) == {"id": "[" * 100_000}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=40).map(str.encode))
def test_any_bytes_decode_or_raise_spec_error(raw: bytes) -> None:
    with contextlib.suppress(SpecError):
        decode_json_bounded(raw, 1000, 4)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=15,
)


@settings(max_examples=100, deadline=None)
@given(
    st.fixed_dictionaries(
        {"id": st.just("w") | JSONISH, "op": st.just(OP) | JSONISH},
        optional={
            k: JSONISH
            for k in (
                "precisions",
                "deadline_ms",
                "objective",
                "seed",
                "inputs",
                "return_output",
                "submitted_at_ms",
            )
        },
    )
)
def test_any_workload_parses_or_raises_spec_error(obj: dict[str, Any]) -> None:
    try:
        parse_workload(obj)
    except SpecError as exc:
        assert str(exc)


def test_parsed_objectives_are_remembered_but_never_shared() -> None:
    """parse_objective keeps what it parsed (most requests name one of a few objectives):
    a caller that changes its dict changes nothing for the next request, and weights that
    compare equal but are refused differently (True against 1) are not taken for each other."""
    first = parse_objective({"latency": 1, "cost": 3})
    first["latency"] = 99.0
    assert parse_objective({"latency": 1, "cost": 3}) == {"latency": 0.25, "energy": 0.0,
                                                          "cost": 0.75}
    with pytest.raises(SpecError):
        parse_objective({"latency": True})
    with pytest.raises(SpecError):
        parse_objective({"latency": [1]})  # not hashable: checked, not remembered
    assert parse_objective("latency") is not parse_objective("latency")
