"""learn: execution metrics → each device class's cost model (and the dmda history), in batches.

Metrics of one class share a partition (see app.topics), so this stage owns a class's model
without a repartition hop: it keeps the model in a table partitioned like the metrics (moved,
and recovered first, with its partition on a rebalance) and publishes a copy to the global
``models`` table that every decider reads. A batch is folded in with one model update per
class and one table write per class: per-event table writes are what limits a Faust agent's throughput.

On a CPU device a row whose CPU time (``cpu_ms``) is well below its wall time (``exec_ms``)
waited for its core while neighbours on it ran: the model learns its CPU time, what the op
costs when it has its core (`model_times`); the history keeps the wall time.

A workload an executor ran in a batched call (``batch_size`` > 1, dynamic batching) is not a
measurement of its op alone: its ``exec_ms`` is a share of the call. The models learn the call
instead, once, as the one op it computed (``models.ops.batched_equivalent``: matmuls stacked
are a bmm, and so on) taking ``batch_exec_ms``; calls of ops with no such equivalent (linear,
mlp, conv2d) and the setup of a new batch size are not learned. The per-op cost of an
unbatched call is thus learned from unbatched calls only; what batching does to a class's
queue is the backlog's pace (agents/complete.py).
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import time
from typing import Any

import numpy as np
import orjson

from agents import registry
from agents.metricbatch import (
    MetricBatch,
    MetricRow,
    block_metrics,
    check_metric,
    parse_block,
)
from app import observability
from app.main import app, settings, topics
from app.streaming import PartitionWrite, assigned_partitions, dead_letter, event_context
from app.tables import class_history, class_models, history, models
from models.costmodel import CostModel, Row
from models.history import HistoryModel
from models.ops import OpSpec, SpecError, Variant, batched_equivalent, parse_op
from models.priors import prior_for_class
from models.registry import class_calibration
from models.setup import update_setup
from models.transfer import update_transfer

logger = logging.getLogger(__name__)
STAGE_CPU = "switchyard_metric_stage_cpu_seconds_total"
# The global copies (``models``, ``history``) are what deciders read, at most every
# MODEL_REFRESH_S (0.5 s, agents/decide.py). Written after every metric batch (up to four a
# second per class: metric_batch_within_s), the class's own table and this copy were each
# ~15 KiB per workload at 10 workloads/s, four fifths of what the broker took. A class's copy
# is written at most every COPY_PERIOD_S: the newest state not yet copied waits in
# ``_pending`` for the timer below, and is dropped when partitions are revoked (the class's
# next owner copies its own state at its next batch).
COPY_PERIOD_S = 0.5
_copied_at: dict[str, float] = {}
_pending: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {}
__all__ = ["MetricRow", "batch_call", "cached_op", "check_metric", "learn_batch", "metric_row",
           "parse_metric", "parse_metrics", "parsed_batch"]


def parse_metrics(raw: bytes) -> tuple[list[MetricRow], list[tuple[int, Any, str]]]:
    """A metrics value's well-formed executions, and ``(index, row, reason)`` for each row
    refused; any form (app.records.metric_rows). ValueError when the value as a whole is
    not a metric or a metric batch."""
    block, refused = parse_block(raw)
    return block_metrics(block), refused


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
# The models this stage last wrote, per class, as objects: the next batch learns on from them
# when the stored versions are still theirs (rebuilding a ~19 KB model from its JSON form for
# every batch was most of the metric stage's cost at low load). Another worker's write (after
# a rebalance) moves the stored versions on, and the stored form is used again.
_LAST_WRITTEN: dict[str, tuple[CostModel, HistoryModel]] = {}
# A row whose CPU time is below this share of its wall time waited for its core (`model_times`).
STRETCHED = 0.8
OP_CACHE_SIZE = 4096


def cached_op(op: Any, variant: Any, key: bytes | None = None) -> tuple[OpSpec, Variant]:
    """``parse_op`` of a metric's op and ``Variant.from_dict`` of its variant, memoised on
    their exact JSON ``key`` (``orjson.dumps((op, variant))``, computed when not given; so
    ``true`` and ``1``, which the parsers tell apart, never share an entry)."""
    if key is None:
        key = orjson.dumps((op, variant))
    parsed = _OP_CACHE.get(key)
    if parsed is None:
        parsed = (parse_op(op, max_elements=settings.max_elements), Variant.from_dict(variant))
        if len(_OP_CACHE) >= OP_CACHE_SIZE:
            _OP_CACHE.clear()
        _OP_CACHE[key] = parsed
    return parsed


def metric_row(metric: MetricRow) -> Row | None:
    """The (op, variant, ms, energy J) row a cost model learns from (ms: as `model_times`, the
    CPU time of a stretched row, else the wall time); for a workload of a batched call, the
    call as its equivalent op (None where the catalog has none)."""
    op, variant = cached_op(metric.op, metric.variant)
    energy = metric.energy_j if isinstance(metric.energy_j, int | float) else None
    size = metric.batch_size
    if size == 1:
        cpu_ms = getattr(metric, "cpu_ms", None)
        ms = float(metric.exec_ms)
        if isinstance(cpu_ms, int | float) and cpu_ms < STRETCHED * ms:
            ms = float(cpu_ms)
        return op, variant, ms, energy
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


async def parsed_batch(stage: str, batch: list[Any]) -> MetricBatch:
    """The batch's well-formed executions, column-wise, each row with the event that carried
    it; a value that is not a metric is dead-lettered whole, a refused row of a batch alone
    (its own bytes, so it can be replayed as a one-row metric once fixed)."""
    blocks = []
    read = 0
    for event in batch:
        try:
            block, refused = parse_block(event.value)
        except ValueError as exc:
            await dead_letter(stage, event, str(exc))
            continue
        block.event = event
        blocks.append(block)
        read += block.rows + len(refused)
        for _, row, reason in refused:
            await dead_letter(stage, event, reason,
                              raw=None if block.whole else orjson.dumps(row))
    observability.inc("switchyard_metric_rows_total", read)
    return MetricBatch.from_blocks(blocks)


def learned_state(device_class: str, stored: dict[str, Any] | None,
                  stored_history: dict[str, Any] | None) -> tuple[CostModel, HistoryModel]:
    """The class's model and history as stored: the objects this stage last wrote when the
    stored versions are theirs, else rebuilt from the stored forms (cold when none)."""
    last = _LAST_WRITTEN.get(device_class)
    if (last is not None and stored is not None and stored_history is not None
            and stored.get("version") == last[0].version
            and stored_history.get("version") == last[1].version):
        return last
    model = CostModel.from_dict(stored) if stored else cold_model(device_class)
    hist = HistoryModel.from_dict(stored_history) if stored_history else HistoryModel()
    return model, hist


def cold_model(device_class: str) -> CostModel:
    """A class's first model: its roofline prior, from the matmul rates its executors measured
    where their heartbeats carry them (runtimes/calibrate.py); the stored model keeps it."""
    members = [d for d in registry.device_records() if d.get("device_class") == device_class]
    return CostModel(device_class, prior_for_class(device_class, dict(class_calibration(members))))


async def _refuse_row(batch: MetricBatch, i: int, reason: str) -> None:
    await dead_letter("learn", batch.event(i), reason,
                      raw=None if batch.whole(i) else orjson.dumps(batch.row(i)))


def model_times(exec_ms: np.ndarray, cpu_ms: np.ndarray, single: np.ndarray) -> np.ndarray:
    """The times the cost model learns: what each op costs when it has its cores. For a call
    of its own whose CPU time is below ``STRETCHED`` x its wall time, the CPU time; else the
    wall time (also where the CPU time is not measured: NaN). On a core other executors
    share, the wall time stretches with their work and the CPU time does not (on the AMD
    EPYC, 2026-12-07: such torch fp32 rows of the live bf16 set read 1.99x the same op's
    wall time under always-torch, their CPU time 1.10x); the router charges that sharing to
    the wait (models/dispatch.py). An op alone on its core reads 0.9-1.1, and keeps its wall
    time (taking the smaller of the two, as tried on 2026-12-06, read most rows a few % low),
    as does an op that kept several cores busy. The dmda baseline's history learns the wall
    time, as StarPU's does."""
    stretched = single & (cpu_ms < STRETCHED * exec_ms)  # NaN compares False
    return np.where(stretched, cpu_ms, exec_ms)


async def learn_batch(batch: MetricBatch) -> None:
    """Fold a batch's successful executions into each class's model and history (called by
    the metric stage, agents/metrics.py, with the batch's well-formed metrics).

    Column-wise: each distinct (op, variant) of the batch is parsed once (memoised across
    batches), each class's rows are learned by one `CostModel.learn_indexed` and one
    `HistoryModel.observe_indexed` in the order they came, and each class's state is written
    once. Rows of batched calls (rare) go through `metric_row` one by one, in place."""
    began = time.thread_time()
    writing = 0.0
    pairs: list[tuple[OpSpec, Variant] | None] = []
    invalid: dict[int, str] = {}
    for j, (key, (op, variant)) in enumerate(zip(batch.shape_keys, batch.shapes, strict=True)):
        try:
            pairs.append(cached_op(op, variant, key))
        except (SpecError, ValueError, TypeError, KeyError) as exc:
            pairs.append(None)
            invalid[j] = f"metric op or variant invalid: {exc}"
    learn = batch.ok.copy()  # a failed run says nothing about how long the op takes
    pair_of = batch.shape.copy()
    exec_ms, energy = batch.exec_ms.copy(), batch.energy_j.copy()
    # batch_size == 1 at C speed (a null batch_size, which the field check lets through as
    # optional, is not 1: such a row is refused below as a batched row without its call).
    single = np.fromiter(map(operator.eq, batch.batch_size, itertools.repeat(1)), dtype=bool,
                         count=batch.rows)
    if invalid:
        bad_shape = np.zeros(len(pairs), dtype=bool)
        bad_shape[list(invalid)] = True
        for i in np.flatnonzero(learn & single & bad_shape[pair_of]).tolist():
            await _refuse_row(batch, i, invalid[int(pair_of[i])])
            learn[i] = False
    # The measured transfers over each class's link (models/transfer.py), of every successful
    # row that measured one, fitted beside the class's model.
    transfer_ms, transfer_bytes = batch.column("transfer_ms"), batch.column("transfer_bytes")
    batched = np.flatnonzero(learn & ~single).tolist()
    if batched:
        await _batched_calls(batch, batched, pairs, invalid, learn, pair_of, exec_ms, energy)
    model_ms = model_times(exec_ms, batch.cpu_ms, single)
    for code, device_class in enumerate(batch.classes):
        rows = np.flatnonzero(learn & (batch.class_code == code))
        if not rows.size:
            continue
        used, index = np.unique(pair_of[rows], return_inverse=True)
        known = [pair for pair in (pairs[u] for u in used.tolist()) if pair is not None]
        if len(known) != used.size:
            raise AssertionError("a row of a refused (op, variant) reached the learner")
        event = batch.event(int(rows[-1]))  # the class's partition
        # The partitioned tables are this stage's state (recovered before its partition
        # resumes); the global copies are only a fallback for state written before they
        # existed.
        with event_context(event):
            stored = class_models.get(device_class) or models.get(device_class)
            stored_history = class_history.get(device_class) or history.get(device_class)
        model, hist = learned_state(device_class, stored, stored_history)
        model.learn_indexed(known, index, model_ms[rows], energy[rows])
        hist.observe_indexed(device_class, known, index, exec_ms[rows], energy[rows])
        model_dict, history_dict = model.to_dict(), hist.to_dict()
        # The one-time setup of new shapes, learned beside the model (models/setup.py).
        setup = single[rows] & np.isfinite(batch.setup_ms[rows])
        model_dict["setup"] = update_setup(
            (stored or {}).get("setup"),
            [(known[k][0].kind, known[k][1].mode, ms, ex) for k, ms, ex in zip(
                index[setup].tolist(), batch.setup_ms[rows][setup].tolist(),
                exec_ms[rows][setup].tolist(), strict=True)])
        model_dict["transfer"] = update_transfer(
            (stored or {}).get("transfer"),
            [(float(transfer_bytes[i]), float(transfer_ms[i])) for i in np.flatnonzero(
                batch.ok & (batch.class_code == code)).tolist()
             if _number(transfer_ms[i]) and _number(transfer_bytes[i])])
        wrote = time.thread_time()
        with event_context(event):
            class_models[device_class] = model_dict
            class_history[device_class] = history_dict
            copy_or_hold(device_class, event, model_dict, history_dict)
        writing += time.thread_time() - wrote
        _LAST_WRITTEN[device_class] = (model, hist)
        observability.inc("switchyard_metrics_learned_total", int(rows.size),
                          device_class=device_class)
        error_pct = model.error_summary().get("median_ape")
        if isinstance(error_pct, int | float):
            observability.set_gauge("switchyard_model_error_ratio", float(error_pct) / 100.0,
                                    device_class=device_class)
    observability.inc(STAGE_CPU, writing, step="tables")
    observability.inc(STAGE_CPU, time.thread_time() - began - writing, step="learn")


def copy_or_hold(device_class: str, event: Any, model_dict: dict[str, Any],
                 history_dict: dict[str, Any]) -> bool:
    """Write the class's global copies (in the current event's partition) unless the last
    copy is younger than COPY_PERIOD_S; then hold them, with ``event``'s partition, for
    ``flush_due``. Whether it wrote."""
    now = time.monotonic()
    if now - _copied_at.get(device_class, -math.inf) < COPY_PERIOD_S:
        _pending[device_class] = (int(event.message.partition), model_dict, history_dict)
        return False
    _pending.pop(device_class, None)
    models[device_class] = model_dict  # the copy every decider reads
    history[device_class] = history_dict
    _copied_at[device_class] = now
    return True


def _owned_metric_partitions() -> set[int]:
    return assigned_partitions(topics.metrics.get_topic_name())


def flush_due() -> None:
    """Write the held copies that are due, of the classes whose partition this worker still
    owns (a revoked one's state is its next owner's to copy)."""
    if not _pending:
        return
    owned = _owned_metric_partitions()
    for device_class, (partition, model_dict, history_dict) in list(_pending.items()):
        if partition not in owned:
            _pending.pop(device_class, None)
            continue
        write = PartitionWrite(topics.metrics.get_topic_name(), partition)
        with event_context(write):
            copy_or_hold(device_class, write, model_dict, history_dict)


@app.timer(interval=COPY_PERIOD_S / 2)
async def flush_copies() -> None:
    """Write the held global copies that are due."""
    flush_due()


async def _on_partitions_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
    _pending.clear()  # every held copy's partition may be moving: its next owner copies


app.on_partitions_revoked.connect(_on_partitions_revoked)  # type: ignore[arg-type]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def _batched_calls(batch: MetricBatch, rows: list[int],
                         pairs: list[tuple[OpSpec, Variant] | None], invalid: dict[int, str],
                         learn: np.ndarray, pair_of: np.ndarray, exec_ms: np.ndarray,
                         energy: np.ndarray) -> None:
    """Rows of batched calls, in order: each call is learned once, by its first row, as the
    one op it computed taking the call's time (`metric_row`); the others are not learned."""
    device_id, started, finished = (batch.column(name) for name in
                                    ("device_id", "started_at_ms", "finished_at_ms"))
    calls: set[tuple[Any, ...]] = set()
    where: dict[tuple[OpSpec, Variant], int] = {}
    for i in rows:
        learn[i] = False
        size, call_ms = batch.batch_size[i], batch.batch_exec_ms[i]
        call = (device_id[i], started[i], finished[i], size, call_ms)
        if call in calls:
            continue  # another workload of a call already learned
        shape = int(pair_of[i])
        parsed = pairs[shape]
        if parsed is None:
            await _refuse_row(batch, i, invalid[shape])
            continue
        if not (type(size) is int and size > 1 and isinstance(call_ms, int | float)):
            await _refuse_row(batch, i, "metric op or variant invalid: batched metric with "
                              f"batch_size {size!r} and batch_exec_ms {call_ms!r}")
            continue
        calls.add(call)
        equivalent = batched_equivalent(parsed[0], size)
        if equivalent is None:
            continue  # a batched call that no op of the catalog computes
        key = (equivalent, parsed[1])
        if key not in where:
            where[key] = len(pairs)
            pairs.append(key)
        learn[i] = True
        pair_of[i] = where[key]
        exec_ms[i] = float(call_ms)
        if np.isfinite(energy[i]):
            energy[i] *= size
