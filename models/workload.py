"""Workload requests (``switchyard.workloads`` values): bounded JSON decoding and validation."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from models.ops import (
    PRECISIONS,
    OpSpec,
    ParseCache,
    SpecError,
    parse_op,
    supports_precision,
    typed_key,
)
from models.tensors import decode_tensor

MAX_ID_LENGTH = 128
# Ids become Kafka keys, file names in traces and log fields: keep them to a boring alphabet.
_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string literal, escapes included
_NOT_BRACKET = re.compile(r"[^\[\]{}]")
KNOWN_FIELDS = frozenset(
    {
        "id",
        "op",
        "precisions",
        "deadline_ms",
        "objective",
        "seed",
        "inputs",
        "return_output",
        "submitted_at_ms",
        "max_cost",
    }
)


@dataclass(frozen=True)
class WorkloadLimits:
    """Size limits applied to every workload (the settings object fills them from the env)."""

    max_elements: int = 2**28  # inputs + output of one op, about 1 GiB at fp32
    max_inline_elements: int = 2**20  # all inline tensors of one request, 4 MiB at fp32
    max_message_bytes: int = 8 * 2**20  # above Kafka's 1 MiB default, so inline 4 MiB fits
    max_depth: int = 32  # workloads nest 4 deep; anything far deeper is hostile


@dataclass  # not frozen: one per workload on the hot path (see models/decision.py::Candidate)
class Workload:
    """A validated request. ``inputs`` (decoded arrays) and ``raw`` stay out of repr."""

    id: str
    op: OpSpec
    precisions: tuple[str, ...] = ("fp32",)
    deadline_ms: float | None = None
    objective: Mapping[str, float] = field(default_factory=lambda: {"latency": 1.0, "energy": 0.0})
    seed: int = 0
    inputs: Mapping[str, np.ndarray] | None = field(default=None, repr=False, compare=False)
    return_output: bool = False
    submitted_at_ms: float | None = None
    # The most the request may cost (price per device-hour x predicted device time, in the
    # price's unit); None: no ceiling.
    max_cost: float | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def decode_json_bounded(raw: bytes, max_bytes: int, max_depth: int) -> object:
    """Decode a Kafka value as JSON, refusing oversize, non-UTF-8, non-JSON or deep input.

    orjson parses without Python recursion and refuses nesting past 1,024 levels itself; the
    nesting of what it parsed is then measured by an iterative walk of its containers (only
    when the text holds more brackets than ``max_depth``), so a hostile ``[[[[...`` cannot
    exhaust the stack. Input orjson refuses as too deep is measured on the text (regexes and
    a NumPy cumulative sum, linear time) for the error message. NaN/Infinity literals are
    rejected: they are not JSON.
    """
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise SpecError(f"message value must be bytes, got {type(raw).__name__}")
    if len(raw) > max_bytes:
        raise SpecError(f"message is {len(raw)} bytes, over the limit {max_bytes}")
    data = raw if isinstance(raw, bytes) else bytes(raw)
    try:
        # orjson reads the bytes (checking UTF-8 itself): no Python recursion, and
        # NaN/Infinity (not JSON) are refused.
        value = orjson.loads(data)
    except (ValueError, RecursionError) as exc:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise SpecError(f"message is not UTF-8: {bad}") from None
        if "depth" in str(exc):
            raise SpecError(f"JSON nests {_text_depth(text)} deep, over the limit "
                            f"{max_depth}") from None
        raise SpecError(f"message is not JSON: {exc}") from None
    # Nesting cannot be deeper than the number of opening brackets (those inside strings
    # included): most messages are settled by two C-speed counts.
    if data.count(b"[") + data.count(b"{") > max_depth:
        depth = nesting_depth(value)
        if depth > max_depth:
            raise SpecError(f"JSON nests {depth} deep, over the limit {max_depth}")
    return value


_CONTAINERS = (dict, list)  # what orjson decodes JSON objects and arrays to, exactly


def nesting_depth(value: object) -> int:
    """How deep a decoded JSON value nests (a scalar: 0), walked level by level without
    recursion (one list comprehension per level: half the cost of a stack of (node, depth)
    pairs on a metric batch)."""
    level = [value] if value.__class__ in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        level = [child for node in level
                 for child in (node.values() if node.__class__ is dict else node)
                 if child.__class__ in _CONTAINERS]
    return depth


def _text_depth(text: str) -> int:
    """The nesting depth of JSON text, brackets inside strings ignored (linear time)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).encode("ascii")
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def _number(name: str, value: object, allow_zero: bool = False) -> float:
    """A finite JSON number (bools excluded) that is positive, or non-negative if allowed."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(f"{name} must be a finite number, got {value!r:.40}")
    if value < 0 or (value == 0 and not allow_zero):
        raise SpecError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return float(value)


def _parse_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError("workload id must be a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise SpecError(f"workload id is {len(value)} characters, over the limit {MAX_ID_LENGTH}")
    if not _ID_PATTERN.fullmatch(value):
        raise SpecError(f"workload id {value[:40]!r} may only use letters, digits and . _ : -")
    return value


def _parse_precisions(op: OpSpec, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError("precisions must be a non-empty list")
    out: list[str] = []
    for p in value:
        if not isinstance(p, str) or p not in PRECISIONS:
            raise SpecError(f"unknown precision {p!r:.40}; expected some of {PRECISIONS}")
        if not supports_precision(op.kind, p):
            raise SpecError(
                f"precision {p} is not defined for {op.kind} (int8: linear, matmul, mlp)"
            )
        if p not in out:
            out.append(p)
    return tuple(out)


OBJECTIVES = ("latency", "energy", "cost")


# Objectives already parsed: most requests name one of a few.
_OBJECTIVES_PARSED: ParseCache[dict[str, float]] = ParseCache(256)


def parse_objective(value: object) -> dict[str, float]:
    """``"latency"`` | ``"energy"`` | ``"cost"`` | ``{"latency": w, "energy": w, "cost": w}``
    (any of the keys) -> weights summing to 1. ``latency`` and ``energy`` are always present
    (0 when not asked for); ``cost`` only when asked for. A new dict each call."""
    if not isinstance(value, str | dict):
        return _parse_objective(value)
    key = value if isinstance(value, str) else typed_key(value)
    return dict(_OBJECTIVES_PARSED.get(key, lambda: _parse_objective(value)))


def _parse_objective(value: object) -> dict[str, float]:
    if isinstance(value, str) and value in OBJECTIVES:
        value = {value: 1}
    if not isinstance(value, dict) or not value or not set(value) <= set(OBJECTIVES):
        raise SpecError('objective must be "latency", "energy", "cost" or weights '
                        '{"latency": w, "energy": w, "cost": w}; got ' f"{value!r:.60}")
    weights = {"latency": 0.0, "energy": 0.0}
    for k, w in value.items():
        weights[k] = _number(f"objective.{k}", w, allow_zero=True)
    total = sum(weights.values())
    if total <= 0:
        raise SpecError("objective weights must not all be zero")
    return {k: w / total for k, w in weights.items()}


def _parse_inputs(op: OpSpec, value: object, limits: WorkloadLimits) -> dict[str, np.ndarray]:
    expected = op.input_shapes()
    if not isinstance(value, dict) or set(value) != set(expected):
        names = ", ".join(expected)
        raise SpecError(f"inputs must give exactly the op's inputs: {names}")
    # The cap is on all inline tensors of the request together; the op fixes their sizes, so
    # check it before decoding anything.
    total = sum(math.prod(shape) for shape in expected.values())
    if total > limits.max_inline_elements:
        raise SpecError(
            f"inline inputs hold {total} elements, over the limit {limits.max_inline_elements}"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, shape in expected.items():
        try:
            arr = decode_tensor(value[name], limits.max_inline_elements)
        except SpecError as exc:
            raise SpecError(f"input {name}: {exc}") from None
        if arr.shape != shape:
            raise SpecError(f"input {name} has shape {list(arr.shape)}, the op needs {list(shape)}")
        if arr.dtype.name != op.dtype:
            raise SpecError(f"input {name} is {arr.dtype.name}, the op's dtype is {op.dtype}")
        arrays[name] = arr
    return arrays


def default_seed(workload_id: str) -> int:
    """The seed used when a request gives none: first 63 bits of sha256(id)."""
    return int.from_bytes(hashlib.sha256(workload_id.encode()).digest()[:8], "big") >> 1


def parse_workload(obj: object, limits: WorkloadLimits | None = None) -> Workload:
    """Validate a decoded workload request; raises SpecError with the reason on any defect."""
    limits = limits or WorkloadLimits()
    if not isinstance(obj, dict):
        raise SpecError(f"workload must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(str(k) for k in obj if k not in KNOWN_FIELDS)
    if unknown:
        raise SpecError(f"workload has unknown field(s) {', '.join(unknown)[:200]}")
    workload_id = _parse_id(obj.get("id"))
    if "op" not in obj:
        raise SpecError("workload is missing op")
    op = parse_op(obj["op"], limits.max_elements)
    precisions = _parse_precisions(op, obj.get("precisions", ["fp32"]))
    deadline = obj.get("deadline_ms")
    deadline_ms = None if deadline is None else _number("deadline_ms", deadline)
    objective = parse_objective(obj.get("objective", "latency"))
    seed = obj.get("seed")
    if seed is None:
        seed = default_seed(workload_id)
    elif type(seed) is not int or not 0 <= seed < 2**63:
        raise SpecError(f"seed must be an integer in [0, 2^63), got {seed!r:.40}")
    inputs = None if obj.get("inputs") is None else _parse_inputs(op, obj["inputs"], limits)
    return_output = obj.get("return_output", False)
    if not isinstance(return_output, bool):
        raise SpecError("return_output must be true or false")
    submitted = obj.get("submitted_at_ms")
    submitted_at_ms = (
        None if submitted is None else _number("submitted_at_ms", submitted, allow_zero=True)
    )
    max_cost = obj.get("max_cost")
    max_cost = None if max_cost is None else _number("max_cost", max_cost, allow_zero=True)
    return Workload(
        id=workload_id,
        op=op,
        precisions=precisions,
        deadline_ms=deadline_ms,
        objective=objective,
        seed=seed,
        inputs=inputs,
        return_output=return_output,
        submitted_at_ms=submitted_at_ms,
        max_cost=max_cost,
        raw=obj,
    )
