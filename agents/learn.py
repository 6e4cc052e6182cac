"""learn: execution metrics → each device class's cost model (and the dmda history), in batches.

Metrics of one class share a partition (see app.topics), so this stage owns a class's model
without a repartition hop: it keeps the model in a table partitioned like the metrics (moved,
and recovered first, with its partition on a rebalance) and publishes a copy to the global
``models`` table that every decider reads. A batch is folded in with one model update per
class and one table write per class: per-event table writes are what limits a Faust agent's throughput.

A workload an executor ran in a batched call (``batch_size`` > 1, dynamic batching) is not a
measurement of its op alone: its ``exec_ms`` is a share of the call. The models learn the call
instead, once, as the one op it computed (``models.ops.batched_equivalent``: matmuls stacked
are a bmm, and so on) taking ``batch_exec_ms``; calls of ops with no such equivalent (linear,
mlp, conv2d) and the setup of a new batch size are not learned. The per-op cost of an
unbatched call is thus learned from unbatched calls only; what batching does to a class's
queue is the backlog's pace (agents/complete.py).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import orjson

from app import observability
from app.main import settings
from app.records import MetricRecord, metric_rows, wire_defaults, wire_fields
from app.streaming import check_fields, dead_letter, decode_object, event_context
from app.tables import class_history, class_models, history, models
from models.costmodel import CostModel, Row
from models.history import HistoryModel
from models.ops import OpSpec, SpecError, Variant, batched_equivalent, parse_op
from models.setup import update_setup

logger = logging.getLogger(__name__)
REQUIRED, OPTIONAL = wire_fields(MetricRecord)
FIELD_SET = frozenset(REQUIRED) | frozenset(OPTIONAL)
STAGE_CPU = "switchyard_metric_stage_cpu_seconds_total"
DEFAULTS = {name: value for name, value in wire_defaults(MetricRecord).items() if name in OPTIONAL}


class MetricRow(SimpleNamespace):
    """One checked execution from the metrics topic: a ``MetricRecord``'s fields as attributes
    (defaults filled in, unknown fields left out). Lighter than the Faust record, whose field
    descriptors cost more than the rest of the metric path per row."""


def check_metric(data: Any) -> MetricRow:
    """Check one decoded execution (a row); ValueError with the reason when it is not one."""
    if not isinstance(data, dict):
        raise ValueError("metric is not a JSON object")
    check_fields(data, "metric", REQUIRED, OPTIONAL)
    if not data["exec_ms"] >= 0:
        raise ValueError(f"metric exec_ms {data['exec_ms']!r} is not a non-negative number")
    row = MetricRow()
    fields = row.__dict__  # filled in place: a third of the cost of MetricRow(**merged)
    fields.update(DEFAULTS)
    fields.update(data if data.keys() <= FIELD_SET
                  else {k: v for k, v in data.items() if k in FIELD_SET})
    return row


def parse_metrics(raw: bytes) -> tuple[list[MetricRow], list[tuple[int, Any, str]]]:
    """A metrics value's well-formed executions, and ``(index, row, reason)`` for each row
    refused; either form (app.records.metric_rows). ValueError when the value as a whole is
    not a metric or a metric batch."""
    rows = metric_rows(decode_object(raw, "metric"))
    good, bad = [], []
    for index, row in enumerate(rows):
        try:
            good.append(check_metric(row))
        except ValueError as exc:
            bad.append((index, row, str(exc) if len(rows) == 1
                        else f"metric {index} of a batch of {len(rows)}: {exc}"))
    return good, bad


def parse_metric(raw: bytes) -> MetricRow:
    """Decode and check a value that must hold exactly one execution."""
    good, bad = parse_metrics(raw)
    if bad:
        raise ValueError(bad[0][2])
    if len(good) != 1:
        raise ValueError(f"expected one metric, the value holds {len(good)}")
    return good[0]


# Parsed (op, variant) pairs by their JSON text: a fleet runs few distinct shapes, and parsing
# one is most of what a row costs once records carry many rows. Bounded: cleared when it grows
# past this.
_OP_CACHE: dict[bytes, tuple[OpSpec, Variant]] = {}
OP_CACHE_SIZE = 4096


def cached_op(op: Any, variant: Any) -> tuple[OpSpec, Variant]:
    """``parse_op`` of a metric's op and ``Variant.from_dict`` of its variant, memoised on
    their exact JSON (so ``true`` and ``1``, which the parsers tell apart, never share an
    entry)."""
    key = orjson.dumps((op, variant))
    parsed = _OP_CACHE.get(key)
    if parsed is None:
        parsed = (parse_op(op, max_elements=settings.max_elements), Variant.from_dict(variant))
        if len(_OP_CACHE) >= OP_CACHE_SIZE:
            _OP_CACHE.clear()
        _OP_CACHE[key] = parsed
    return parsed


def metric_row(metric: MetricRow) -> Row | None:
    """The (op, variant, exec ms, energy J) row a cost model learns from; for a workload of a
    batched call, the call as its equivalent op (None where the catalog has none)."""
    op, variant = cached_op(metric.op, metric.variant)
    energy = metric.energy_j if isinstance(metric.energy_j, int | float) else None
    size = metric.batch_size
    if size == 1:
        return op, variant, float(metric.exec_ms), energy
    if not (type(size) is int and size > 1 and isinstance(metric.batch_exec_ms, int | float)):
        raise ValueError(f"batched metric with batch_size {size!r} and batch_exec_ms "
                         f"{metric.batch_exec_ms!r}")
    equivalent = batched_equivalent(op, size)
    if equivalent is None:
        return None
    return (equivalent, variant, float(metric.batch_exec_ms),
            energy * size if energy is not None else None)


def batch_call(metric: MetricRow) -> tuple[Any, ...] | None:
    """What the rows of one batched call share (None for an unbatched row): the call is
    learned once, not once per workload."""
    if metric.batch_size == 1:
        return None
    return (metric.device_id, metric.started_at_ms, metric.finished_at_ms,
            metric.batch_size, metric.batch_exec_ms)


async def parsed_batch(stage: str, batch: list[Any]) -> list[tuple[Any, MetricRow]]:
    """The batch's well-formed executions, each with the event that carried it; a value that is
    not a metric is dead-lettered whole, a refused row of a batch alone (its own bytes, so it
    can be replayed as a one-row metric once fixed)."""
    out: list[tuple[Any, MetricRow]] = []
    read = 0
    for event in batch:
        try:
            good, bad = parse_metrics(event.value)
        except ValueError as exc:
            await dead_letter(stage, event, str(exc))
            continue
        read += len(good) + len(bad)
        out.extend((event, metric) for metric in good)
        for _, row, reason in bad:
            await dead_letter(stage, event, reason,
                              raw=None if len(good) + len(bad) == 1 else orjson.dumps(row))
    observability.inc("switchyard_metric_rows_total", read)
    return out


async def learn_batch(parsed: list[tuple[Any, MetricRow]]) -> None:
    """Fold a batch's successful executions into each class's model and history (called by
    the metric stage, agents/metrics.py, with the batch's well-formed metrics)."""
    began = time.thread_time()
    writing = 0.0
    rows: dict[str, list[Row]] = defaultdict(list)
    setups: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    last_event: dict[str, Any] = {}
    calls: set[tuple[Any, ...]] = set()
    for event, metric in parsed:
        if metric.status != "ok":
            continue  # a failed run says nothing about how long the op takes
        call = batch_call(metric)
        if call is not None and call in calls:
            continue  # another workload of a call already learned
        try:
            row = metric_row(metric)
        except (SpecError, ValueError, TypeError, KeyError) as exc:
            await dead_letter("learn", event, f"metric op or variant invalid: {exc}")
            continue
        if call is not None:
            calls.add(call)
        if row is None:
            continue  # a batched call that no op of the catalog computes
        rows[metric.device_class].append(row)
        if call is None and isinstance(metric.setup_ms, int | float):
            setups[metric.device_class].append((row[0].kind, row[1].mode,
                                                float(metric.setup_ms)))
        last_event[metric.device_class] = event
    for device_class, class_rows in rows.items():
        # The partitioned tables are this stage's state (recovered before its partition
        # resumes); the global copies are only a fallback for state written before they
        # existed.
        with event_context(last_event[device_class]):  # the class's partition
            stored = class_models.get(device_class) or models.get(device_class)
            stored_history = class_history.get(device_class) or history.get(device_class)
        model = CostModel.from_dict(stored) if stored else CostModel.for_class(device_class)
        model.learn_many(class_rows)
        hist = HistoryModel.from_dict(stored_history) if stored_history else HistoryModel()
        hist.observe_many(device_class, class_rows)
        model_dict, history_dict = model.to_dict(), hist.to_dict()
        # The one-time setup of new shapes, learned beside the model (models/setup.py).
        model_dict["setup"] = update_setup((stored or {}).get("setup"),
                                           setups.get(device_class, ()))
        wrote = time.thread_time()
        with event_context(last_event[device_class]):
            class_models[device_class] = model_dict
            class_history[device_class] = history_dict
            models[device_class] = model_dict  # the copy every decider reads
            history[device_class] = history_dict
        writing += time.thread_time() - wrote
        observability.inc("switchyard_metrics_learned_total", len(class_rows),
                          device_class=device_class)
        error_pct = model.error_summary().get("median_ape")
        if isinstance(error_pct, int | float):
            observability.set_gauge("switchyard_model_error_ratio", float(error_pct) / 100.0,
                                    device_class=device_class)
    observability.inc(STAGE_CPU, writing, step="tables")
    observability.inc(STAGE_CPU, time.thread_time() - began - writing, step="learn")
