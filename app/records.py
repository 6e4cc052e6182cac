"""Wire schemas of the contract's topics, as Faust records.

Values are plain JSON objects with no Faust metadata (``include_metadata=False``), so any
client in any language reads them; the JSON Schemas in ``app/schemas/`` describe the same
fields. Optional fields are ``None`` where a value was not measured or does not apply.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import faust


class _Wire(faust.Record, serializer="json", include_metadata=False, abstract=True):
    """Base of every record on the wire."""


class RouteRecord(_Wire):
    """One routing decision on ``switchyard.routes.<device_class>``, key = workload id.

    An executor needs nothing but this record to do the work.
    """

    id: str
    workload: dict[str, Any]
    device_class: str
    variant: dict[str, Any]
    predicted_ms: float
    predicted_std_ms: float
    reason: str
    model_version: int
    decided_at_ms: int
    predicted_energy_j: float | None = None
    policy: str = "switchyard"
    expected_wait_ms: float = 0.0
    meets_deadline: bool = True
    # 1 for the first decision; higher when the workload was routed again after its class died.
    attempt: int = 1
    # Why the class won (models/policy.py): the request's objective weights, the expected
    # transfer over the class's link and the expected cost (price x device time), whether
    # the joules are the class prior's estimate, and the terms of the chosen and the best
    # other candidates.
    objective: dict[str, float] | None = None
    predicted_transfer_ms: float = 0.0
    predicted_cost: float = 0.0
    energy_estimated: bool = False
    compared: list[dict[str, Any]] | None = None


class MetricRecord(_Wire):
    """One execution on ``switchyard.metrics``, key = device id, partitioned by device class."""

    workload_id: str
    device_id: str
    device_class: str
    runtime: str
    op: dict[str, Any]
    variant: dict[str, Any]
    flops: float
    bytes_moved: float
    status: str
    queue_ms: float
    exec_ms: float
    started_at_ms: int
    finished_at_ms: int
    compile_ms: float | None = None
    energy_j: float | None = None
    predicted_ms: float | None = None
    setup_ms: float | None = None
    error: str | None = None
    attempt: int = 1
    simulated: bool = False
    throttled: bool = False
    # Dynamic batching: the workloads run by the one call this execution was part of (1: a
    # call of its own), and that call's whole time; ``exec_ms`` is then this workload's share,
    # ``batch_exec_ms / batch_size``. Rows of executors without batching have neither.
    batch_size: int = 1
    batch_exec_ms: float | None = None
    # Behind a declared link (models/transfer.py): the bytes moved (up + down), the measured
    # wait for them (outside ``exec_ms``), and whether that link is simulated (the executor
    # waits the declared link's time; it is not a network). Null/false where no link.
    transfer_ms: float | None = None
    transfer_bytes: int | None = None
    link_simulated: bool = False
    # ``energy_j`` is modelled from the published idle and peak power of a catalog device
    # (sim runtimes, or an executor given --power-model), not read from a counter.
    energy_simulated: bool = False


# The metrics topic's second form: many executions in one record, as an executor publishes what
# it ran since its last flush (a few milliseconds, or up to ``executor_metric_batch_rows``).
# A record with ``"version": 2`` carries its rows under ``"metrics"``; a record without a
# ``version`` is one execution (the first form, still what a single row is published as).
METRIC_BATCH_VERSION = 2


def metric_batch_bytes(rows: list[bytes]) -> bytes:
    """The wire value of a batch of already-encoded metric rows (one row: the row itself)."""
    if len(rows) == 1:
        return rows[0]
    return b'{"version":%d,"metrics":[%s]}' % (METRIC_BATCH_VERSION, b",".join(rows))


def metric_rows(data: dict[str, Any]) -> list[Any]:
    """The executions a decoded metrics value carries, one JSON object (or whatever the
    producer put there) per execution, in either form: what a downstream reader of
    ``switchyard.metrics`` calls to see one row per execution. ValueError on a batch of an
    unknown version or without a ``metrics`` list."""
    if "version" not in data:
        return [data]
    if data.get("version") != METRIC_BATCH_VERSION:
        raise ValueError(f"metric batch version {data.get('version')!r} is not "
                         f"{METRIC_BATCH_VERSION}")
    rows = data.get("metrics")
    if not isinstance(rows, list) or set(data) != {"version", "metrics"}:
        raise ValueError('a metric batch is {"version": 2, "metrics": [one object per '
                         'execution]} and nothing else')
    return rows


class HeartbeatRecord(_Wire):
    """An executor's periodic liveness report on ``switchyard.heartbeats``, key = device id."""

    device_id: str
    device_class: str
    runtime: str
    device: str
    capabilities: list[list[str]]
    queue_depth: int
    sent_at_ms: int
    started_at_ms: int
    model: str = ""
    in_hand: int = 0
    memory_bytes: int | None = None
    power_w: float | None = None
    threads: int | None = None
    # The cores the executor is pinned to (runtimes/affinity.py); null where unpinned.
    cpus: list[int] | None = None
    simulated: bool = False
    # "up" while serving; "stopping" in the last heartbeat of a clean shutdown.
    state: str = "up"
    # The partitions of its class's route topic this executor consumes (its consumer group's
    # assignment); the worker sends a route to the partition of the least-loaded device.
    route_partitions: list[int] | None = None
    # The link the executor declares it sits behind, {"rtt_ms", "bandwidth_mbit_s"}, and its
    # price per device-hour; null when local / unpriced (models/transfer.py).
    link: dict[str, float] | None = None
    price_per_hour: float | None = None
    # The catalog device whose published power models energy (sim, or --power-model).
    power_model: str | None = None


class ResultRecord(_Wire):
    """The one result of a workload on ``switchyard.results`` (key = workload id).

    Executors publish the same shape to the internal ``switchyard.outcomes`` topic; the worker
    forwards the first outcome of each workload here and suppresses later duplicates.
    """

    id: str
    status: str
    device_id: str
    device_class: str
    variant: dict[str, Any]
    latency_ms: float
    queue_ms: float
    checksum: str | None = None
    energy_j: float | None = None
    error: str | None = None
    output: dict[str, Any] | None = None
    compile_ms: float | None = None
    attempt: int = 1
    simulated: bool = False
    decided_at_ms: int | None = None
    finished_at_ms: int | None = None
    submitted_at_ms: float | None = None
    # The workloads run by the one batched call this one was part of (1: a call of its own);
    # ``latency_ms`` is that call's time.
    batch_size: int = 1
    # The measured wait for the workload's bytes over a declared link (null: none).
    transfer_ms: float | None = None
    energy_simulated: bool = False


class DeadLetterRecord(_Wire):
    """A rejected message on ``switchyard.deadletter``, with everything needed to replay it."""

    topic: str
    partition: int
    offset: int
    reason: str
    raw_b64: str
    stage: str
    rejected_at_ms: int
    key: str | None = None


ALL_RECORDS: tuple[type[_Wire], ...] = (
    RouteRecord,
    MetricRecord,
    HeartbeatRecord,
    ResultRecord,
    DeadLetterRecord,
)


# The kind of each Python field type, as ``app.streaming.check_fields`` checks it.
_KINDS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                          dict: "object", list: "list"}


def _kind(annotation: Any) -> str | None:
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _kind(kinds[0]) if len(kinds) == 1 else None
    return _KINDS.get(origin or annotation)


def wire_defaults(record: type[_Wire]) -> dict[str, Any]:
    """The default of each optional field of a wire record."""
    return dict(record._options.defaults)


def wire_fields(record: type[_Wire]) -> tuple[dict[str, str], dict[str, str]]:
    """The required and the optional fields of a wire record, each with its kind, derived from
    the record itself: a field without a default is required. Every stage that parses a record
    checks it with these, so the parser, the record and its JSON Schema cannot disagree
    (tests/app/test_records.py holds the schemas to them)."""
    options = record._options
    required: dict[str, str] = {}
    optional: dict[str, str] = {}
    for name, annotation in options.fields.items():
        kind = _kind(annotation)
        if kind is not None:
            (optional if name in options.defaults else required)[name] = kind
    return required, optional
