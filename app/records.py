"""Wire schemas of the contract's topics, as Faust records.

Values are plain JSON objects with no Faust metadata (``include_metadata=False``), so any
client in any language reads them; the JSON Schemas in ``app/schemas/`` describe the same
fields. Optional fields are ``None`` where a value was not measured or does not apply.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from typing import Any

import faust
import orjson
from faust.utils import json as faust_json
from mode.utils.compat import want_bytes


class _Wire(faust.Record, serializer="json", include_metadata=False, abstract=True):
    """Base of every record on the wire."""


def wire_bytes(record_type: type[_Wire], fields: typing.Mapping[str, Any]) -> bytes:
    """``record_type(**fields).dumps()``, byte for byte, without building the record: its
    fields in declared order, defaults where ``fields`` has none, through Faust's own JSON
    encoder (orjson and Faust's ``on_default``). Building a Faust record and dumping it cost
    ~10 µs a route on the decide stage's hot path; this ~1. A missing required field raises
    KeyError."""
    options = record_type._options
    defaults = options.defaults
    payload = {name: fields[name] if name in fields else defaults[name]
               for name in options.fields}
    return want_bytes(faust_json.dumps(payload))


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
    # An informative probe of an idle class (agents/probe.py): the executor runs it and
    # publishes its metric, but no outcome (nobody submitted it; it has no result).
    probe: bool = False


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
    # The executor process's CPU time over the timed call, on a CPU device (null elsewhere, and
    # from executors older than this field): at most ``exec_ms`` for an op that had its one
    # core alone; less where other work on a shared core stretched the wall time.
    cpu_ms: float | None = None
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


# The metrics topic's batch forms: many executions of one executor in one record, as it
# publishes what it ran since its last flush (a few milliseconds, or up to
# ``executor_metric_batch_rows``). A record without a ``version`` is one execution (the first
# form, still what a single row is published as). ``"version": 2`` carries its rows as objects
# under ``"metrics"``; ``"version": 3`` (what executors publish) carries them column-wise:
#
#   {"version": 3, "rows": n,
#    "fields": {name: the value of every row, ...},
#    "columns": {name: [n values], ...  or  name: {"values": [distinct], "index": [n ints]}}}
#
# Every field of a row is in ``fields`` or in ``columns``, not both; a column is a list of one
# value per row, or dictionary-encoded (``values[index[i]]`` is row i's). Row i is
# ``{**fields, name: column value i for each column}``: ``metric_rows`` rebuilds them.
METRIC_BATCH_VERSION = 2
METRIC_COLUMNS_VERSION = 3
METRIC_VERSIONS = (METRIC_BATCH_VERSION, METRIC_COLUMNS_VERSION)
MetricColumn = list[Any] | tuple[list[Any], list[int]]


def metric_batch_bytes(rows: list[bytes]) -> bytes:
    """The version-2 wire value of a batch of already-encoded metric rows (one row: the row
    itself)."""
    if len(rows) == 1:
        return rows[0]
    return b'{"version":%d,"metrics":[%s]}' % (METRIC_BATCH_VERSION, b",".join(rows))


def dictionary_encode(values: Iterable[Any]) -> tuple[list[Any], list[bytes], list[int]]:
    """The distinct values (equal when their JSON forms are), those JSON forms, and the index of
    each value among the distinct ones."""
    where: dict[bytes, int] = {}
    distinct: list[Any] = []
    index: list[int] = []
    for value in values:
        key = orjson.dumps(value)
        at = where.get(key)
        if at is None:
            at = where[key] = len(distinct)
            distinct.append(value)
        index.append(at)
    return distinct, list(where), index


def metric_columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The version-3 (columnar) value of metric rows that all have the same fields: a field
    equal in every row goes to ``fields``; objects and lists (op, variant) are
    dictionary-encoded; the rest are plain columns. ValueError when the rows' fields differ."""
    names = list(rows[0])
    if any(row.keys() != rows[0].keys() for row in rows):
        raise ValueError("metric rows of one columnar record must have the same fields")
    fields: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    for name in names:
        values = [row[name] for row in rows]
        first = values[0]
        kind = type(first)
        if all(type(v) is kind and v == first for v in values):
            fields[name] = first
        elif kind is dict or kind is list:
            distinct, _, index = dictionary_encode(values)
            columns[name] = {"values": distinct, "index": index}
        else:
            columns[name] = values
    return {"version": METRIC_COLUMNS_VERSION, "rows": len(rows), "fields": fields,
            "columns": columns}


def metric_columns_bytes(rows: list[bytes]) -> bytes:
    """The wire value of already-encoded metric rows in the columnar form (one row: the row
    itself; rows whose fields differ: the version-2 form)."""
    if len(rows) == 1:
        return rows[0]
    try:
        return orjson.dumps(metric_columns([orjson.loads(row) for row in rows]))
    except ValueError:
        return metric_batch_bytes(rows)


def check_metric_columns(data: dict[str, Any]) -> tuple[int, dict[str, Any],
                                                        dict[str, MetricColumn]]:
    """The parts of a version-3 value: its row count, its ``fields`` and its columns (a list of
    one value per row, or ``(distinct values, index per row)``). ValueError naming what is
    wrong with its structure."""
    if set(data) != {"version", "rows", "fields", "columns"}:
        raise ValueError('a columnar metric batch is {"version": 3, "rows": n, "fields": {...}, '
                         '"columns": {...}} and nothing else')
    rows, fields, columns = data["rows"], data["fields"], data["columns"]
    if type(rows) is not int or rows < 1:
        raise ValueError(f"metric batch rows {rows!r} is not a positive integer")
    if not isinstance(fields, dict) or not isinstance(columns, dict):
        raise ValueError("metric batch fields and columns must be objects")
    both = fields.keys() & columns.keys()
    if both:
        raise ValueError(f"metric batch has {', '.join(sorted(both))} in both fields and columns")
    out: dict[str, MetricColumn] = {}
    for name, column in columns.items():
        if isinstance(column, list):
            if len(column) != rows:
                raise ValueError(f"metric batch column {name} has {len(column)} values for "
                                 f"{rows} rows")
            out[name] = column
            continue
        if not (isinstance(column, dict) and column.keys() == {"values", "index"}
                and isinstance(column["values"], list) and isinstance(column["index"], list)):
            raise ValueError(f"metric batch column {name} is neither a list nor "
                             '{"values": [...], "index": [...]}')
        values, index = column["values"], column["index"]
        if len(index) != rows:
            raise ValueError(f"metric batch column {name} has {len(index)} indexes for "
                             f"{rows} rows")
        if index and (set(map(type, index)) != {int} or min(index) < 0
                      or max(index) >= len(values)):
            raise ValueError(f"metric batch column {name} has an index outside its "
                             f"{len(values)} values")
        out[name] = (values, index)
    return rows, fields, out


def column_values(column: MetricColumn) -> list[Any]:
    """A column's value per row."""
    if isinstance(column, list):
        return column
    values, index = column
    return [values[i] for i in index]


def metric_rows(data: dict[str, Any]) -> list[Any]:
    """The executions a decoded metrics value carries, one JSON object (or whatever the
    producer put there) per execution, in any form: what a downstream reader of
    ``switchyard.metrics`` calls to see one row per execution. ValueError on a batch of an
    unknown version or of the wrong structure."""
    if "version" not in data:
        return [data]
    version = data.get("version")
    if version == METRIC_COLUMNS_VERSION:
        count, fields, columns = check_metric_columns(data)
        names = list(columns)
        expanded = [column_values(columns[name]) for name in names]
        return [{**fields, **dict(zip(names, values, strict=True))}
                for values in zip(*expanded, strict=True)] if names else [
                    dict(fields) for _ in range(count)]
    if version != METRIC_BATCH_VERSION:
        raise ValueError(f"metric batch version {version!r} is not one of "
                         f"{', '.join(map(str, METRIC_VERSIONS))}")
    rows = data.get("metrics")
    if not isinstance(rows, list) or set(data) != {"version", "metrics"}:
        raise ValueError('a metric batch is {"version": 2, "metrics": [one object per '
                         'execution]} and nothing else')
    return rows


def metric_count(data: dict[str, Any]) -> int:
    """How many executions a decoded metrics value carries, without rebuilding its rows."""
    if data.get("version") == METRIC_COLUMNS_VERSION and type(data.get("rows")) is int:
        return int(data["rows"])
    return len(metric_rows(data))


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
    # The executor's host name: pinned executors on one host that share a core share its
    # time, so the router counts each one's queued work in the others' waits.
    host: str | None = None
    # Executors of one process sharing its compute thread (``--runtime torch,jax``) name the
    # same group: their executions run one at a time, in the order they arrived, so the
    # router counts the group's queued work as one queue. Null for an executor of its own.
    queue_group: str | None = None
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
    # GFLOP/s of a 256^3 eager matmul per precision, measured when the executor started, in
    # its threads and cores (runtimes/calibrate.py); the class's cold prior runs at these
    # rates. Null on simulated and accelerator devices.
    calibration: dict[str, float] | None = None
    # ms of one reference op of each other kind (models/priors.py::REFERENCE_OPS) per eager
    # precision, of layernorm and softmax out of the cache in fp32 (OUT_OF_CACHE_OPS), of the
    # reference linear with gelu in fp32 (ACTIVATION_OPS), and of
    # the per-call op (DISPATCH_OP, fp32), keyed by the op's signature,
    # measured with ``calibration`` (runtimes/calibrate.py::calibrate_kernels); the class's
    # cold prior bends each kind's roofline by how far its reference op missed it and takes
    # the per-call op's time as its overhead. Null where ``calibration`` is.
    kernel_ms: dict[str, dict[str, float]] | None = None
    # Per mode, what the first run of a shape new to the executor costs beyond one execution
    # (building, compiling, lazy initialisation), measured with ``calibration`` on the
    # reference ops (runtimes/calibrate.py::calibrate_setup): the router's setup charge for
    # a cold shape until workloads measured it (models/setup.py). Null where ``calibration``
    # is.
    setup_excess_ms: dict[str, float] | None = None


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
    # The one-time setup of a (shape, variant) new to the executor, outside ``latency_ms``:
    # building (compiling) it and its untimed warm-up run; null when it was warm.
    setup_ms: float | None = None
    # How long the executor held the workload, from taking it off its queue to this outcome
    # (a batched call's routes: the call's whole time), by its monotonic clock, where the
    # timestamps above are whole milliseconds; null from older executors.
    held_ms: float | None = None


# The outcomes topic's batch form: an executor publishes the outcomes it finished within a few
# milliseconds (``executor_outcome_linger_ms``, up to ``executor_outcome_batch_rows``) as one
# record per outcomes partition, ``{"version": 2, "outcomes": [outcome, ...]}``, every outcome
# of it on the partition of its workload id (``topics.key_partition``), keyed by the first
# one's id. A record without a ``version`` is one outcome (what a lone one is published as).
OUTCOME_BATCH_VERSION = 2


def outcome_batch_bytes(outcomes: list[bytes]) -> bytes:
    """The wire value of already-encoded outcomes of one partition (one: the outcome itself)."""
    if len(outcomes) == 1:
        return outcomes[0]
    return b'{"version":%d,"outcomes":[%s]}' % (OUTCOME_BATCH_VERSION, b",".join(outcomes))


def outcome_rows(value: Any) -> list[Any]:
    """The outcomes a decoded outcomes value carries, one per workload, as a reader of the topic
    sees them (a value that is not a batch: itself)."""
    if (isinstance(value, dict) and value.get("version") == OUTCOME_BATCH_VERSION
            and isinstance(value.get("outcomes"), list)):
        return list(value["outcomes"])
    return [value]


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


def row_maker(record: type[_Wire], row_type: type[types.SimpleNamespace]
              ) -> typing.Callable[[dict[str, Any]], Any]:
    """A maker of ``row_type`` rows from decoded, already checked fields of ``record``: each
    field the record declares with a kind (`wire_fields`) as a plain attribute, defaults
    filled in, unknown fields left out. A stage's hot path reads these instead of a Faust
    record, whose construction and field descriptors cost more than the stage's own work
    (``wire_bytes(record, vars(row))`` is the record's bytes)."""
    required, optional = wire_fields(record)
    names = frozenset(required) | frozenset(optional)
    defaults = {name: value for name, value in wire_defaults(record).items() if name in optional}

    def make(data: dict[str, Any]) -> Any:
        row = row_type()
        fields = row.__dict__  # filled in place: a third of the cost of row_type(**merged)
        fields.update(defaults)
        fields.update(data if data.keys() <= names
                      else {k: v for k, v in data.items() if k in names})
        return row

    return make


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
