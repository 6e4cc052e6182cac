"""learn: execution metrics → each device class's cost model (and the dmda history), in batches.

Metrics of one class share a partition (see app.topics), so this stage owns a class's model
without a repartition hop: it keeps the model in a table partitioned like the metrics (moved,
and recovered first, with its partition on a rebalance) and publishes a copy to the global
``models`` table that every decider reads. A batch is folded in with one model update per
class and one table write per class: per-event table writes are what limits a Faust agent's throughput.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from app import observability
from app.main import settings
from app.records import MetricRecord, wire_fields
from app.streaming import check_fields, dead_letter, decode_object, event_context
from app.tables import class_history, class_models, history, models
from models.costmodel import CostModel, Row
from models.history import HistoryModel
from models.ops import SpecError, Variant, parse_op
from models.setup import update_setup

logger = logging.getLogger(__name__)
REQUIRED, OPTIONAL = wire_fields(MetricRecord)


def parse_metric(raw: bytes) -> MetricRecord:
    """Decode and check a metric; ValueError with the reason when it is not one."""
    data = decode_object(raw, "metric")
    check_fields(data, "metric", REQUIRED, OPTIONAL)
    try:
        metric = MetricRecord.from_data(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed metric: {exc}") from None
    if not isinstance(metric.exec_ms, int | float) or not metric.exec_ms >= 0:
        raise ValueError(f"metric exec_ms {metric.exec_ms!r} is not a non-negative number")
    return metric


def metric_row(metric: MetricRecord) -> Row:
    """The (op, variant, exec ms, energy J) row a cost model learns from."""
    op = parse_op(metric.op, max_elements=settings.max_elements)
    variant = Variant.from_dict(metric.variant)
    energy = metric.energy_j if isinstance(metric.energy_j, int | float) else None
    return op, variant, float(metric.exec_ms), energy


async def parsed_batch(stage: str, batch: list[Any]) -> list[tuple[Any, MetricRecord]]:
    """The batch's well-formed metrics with their events; the rest are dead-lettered."""
    out = []
    for event in batch:
        try:
            out.append((event, parse_metric(event.value)))
        except ValueError as exc:
            await dead_letter(stage, event, str(exc))
    return out


async def learn_batch(parsed: list[tuple[Any, MetricRecord]]) -> None:
    """Fold a batch's successful executions into each class's model and history (called by
    the metric stage, agents/metrics.py, with the batch's well-formed metrics)."""
    rows: dict[str, list[Row]] = defaultdict(list)
    setups: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    last_event: dict[str, Any] = {}
    for event, metric in parsed:
        if metric.status != "ok":
            continue  # a failed run says nothing about how long the op takes
        try:
            row = metric_row(metric)
        except (SpecError, ValueError, TypeError, KeyError) as exc:
            await dead_letter("learn", event, f"metric op or variant invalid: {exc}")
            continue
        rows[metric.device_class].append(row)
        if isinstance(metric.setup_ms, int | float):
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
        with event_context(last_event[device_class]):
            class_models[device_class] = model_dict
            class_history[device_class] = history_dict
            models[device_class] = model_dict  # the copy every decider reads
            history[device_class] = history_dict
        observability.inc("switchyard_metrics_learned_total", len(class_rows),
                          device_class=device_class)
        error_pct = model.error_summary().get("median_ape")
        if isinstance(error_pct, int | float):
            observability.set_gauge("switchyard_model_error_ratio", float(error_pct) / 100.0,
                                    device_class=device_class)
