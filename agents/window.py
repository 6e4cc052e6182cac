"""window: execution metrics → tumbling and hopping windows per (device class, op kind).

Each batch is aggregated per key in NumPy and merged into each window once. Expired windows
are deleted by Faust's sweeper while the worker runs; windows left in RocksDB by an earlier run
are not known to that sweeper after a restart (faust-streaming issue 385), so this stage sweeps
them itself from the stored keys.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from agents.metricbatch import MetricBatch
from app import observability
from app.main import settings
from app.streaming import event_context
from app.tables import hopping, tumbling
from models.sketch import WindowStats

logger = logging.getLogger(__name__)
SWEEP_EVERY_S = 10.0
STAGE_CPU = "switchyard_metric_stage_cpu_seconds_total"


def merge_stats(stored: dict[str, Any] | None, batch: dict[str, Any]) -> dict[str, Any]:
    """Window operator: fold a batch's statistics into the window's (None: empty window)."""
    if not stored:
        return batch
    merged = WindowStats.from_dict(stored)
    merged.merge(WindowStats.from_dict(batch))
    return merged.to_dict()


def expired_keys(keys: list[Any], now_s: float, expires_s: float) -> list[Any]:
    """Stored window keys ``(key, (start, end))`` whose window ended over ``expires_s`` ago.

    Keys come back from the store JSON-decoded, as lists: they are returned as the tuples Faust
    itself uses (its expiry bookkeeping hashes them when a window this process wrote is
    deleted; a list key crashed the stage once a long-running worker outlived its windows).
    """
    out = []
    for stored in keys:
        try:
            name, (start, end) = stored
            ended = float(end)
        except (TypeError, ValueError):
            continue
        if ended + expires_s < now_s:
            out.append((name, (start, end)))
    return out


def sweep_expired(event: Any) -> int:
    """Delete expired windows of both tables from this worker's store; return how many."""
    removed = 0
    for wrapper in (tumbling, hopping):
        table = wrapper.table
        stale = expired_keys(list(table.keys()), time.time(), settings.window_expires_s)
        with event_context(event):
            for key in stale:
                del table[key]
        removed += len(stale)
    return removed


_last_sweep = [0.0]


def window_batch(batch: MetricBatch) -> None:
    """Aggregate a batch's metrics per (class, op kind) in NumPy and merge them into the
    current windows, one table update per key (called by the metric stage,
    agents/metrics.py); sweep expired windows now and then."""
    began = time.thread_time()
    writing = 0.0
    kinds: dict[Any, int] = {}
    shape_kind = np.fromiter(
        (kinds.setdefault(op.get("kind") if isinstance(op, dict) else None, len(kinds))
         for op, _ in batch.shapes), dtype=np.intp, count=len(batch.shapes))
    kind_names = list(kinds)
    group = batch.class_code * max(len(kind_names), 1) + shape_kind[batch.shape]
    keys, first, member = np.unique(group, return_index=True, return_inverse=True)
    order = np.argsort(member, kind="stable")
    ends = np.cumsum(np.bincount(member, minlength=keys.size))
    for g in np.argsort(first).tolist():  # keys in the order they first came
        rows = order[(ends[g - 1] if g else 0):ends[g]]
        code, kind = divmod(int(keys[g]), max(len(kind_names), 1))
        stats = WindowStats()
        stats.add_batch(batch.exec_ms[rows], errors=~batch.ok[rows],
                        energies=batch.energy_j[rows])
        value = stats.to_dict()
        wrote = time.thread_time()
        key = f"{batch.classes[code]}|{kind_names[kind]}"
        with event_context(batch.event(int(rows[-1]))):
            tumbling[key].apply(merge_stats, value)
            hopping[key].apply(merge_stats, value)
        writing += time.thread_time() - wrote
    if batch.rows and time.monotonic() - _last_sweep[0] > SWEEP_EVERY_S:
        _last_sweep[0] = time.monotonic()
        removed = sweep_expired(batch.event(batch.rows - 1))
        if removed:
            logger.info("swept %d expired windows", removed)
    observability.inc(STAGE_CPU, writing, step="tables")
    observability.inc(STAGE_CPU, time.thread_time() - began - writing, step="window")
