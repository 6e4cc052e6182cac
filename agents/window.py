"""window: execution metrics → tumbling and hopping windows per (device class, op kind).

Each batch is aggregated per key in NumPy and merged into each window once. Expired windows
are deleted by Faust's sweeper while the worker runs; windows left in RocksDB by an earlier run
are not known to that sweeper after a restart (faust-streaming issue 385), so this stage sweeps
them itself from the stored keys.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

from agents.learn import MetricRow
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


def window_batch(parsed: list[tuple[Any, MetricRow]]) -> None:
    """Aggregate a batch's metrics per (class, op kind) and merge them into the current windows
    (called by the metric stage, agents/metrics.py); sweep expired windows now and then."""
    began = time.thread_time()
    writing = 0.0
    batch = [event for event, _ in parsed]
    grouped: dict[str, list[Any]] = defaultdict(list)
    for event, metric in parsed:
        kind = metric.op.get("kind") if isinstance(metric.op, dict) else None
        grouped[f"{metric.device_class}|{kind}"].append((event, metric))
    for key, members in grouped.items():
        stats = WindowStats()
        stats.add_batch(
            [float(m.exec_ms) for _, m in members],
            errors=[m.status != "ok" for _, m in members],
            energies=[m.energy_j for _, m in members],
        )
        value = stats.to_dict()
        wrote = time.thread_time()
        with event_context(members[-1][0]):
            tumbling[key].apply(merge_stats, value)
            hopping[key].apply(merge_stats, value)
        writing += time.thread_time() - wrote
    if batch and time.monotonic() - _last_sweep[0] > SWEEP_EVERY_S:
        _last_sweep[0] = time.monotonic()
        removed = sweep_expired(batch[-1])
        if removed:
            logger.info("swept %d expired windows", removed)
    observability.inc(STAGE_CPU, writing, step="tables")
    observability.inc(STAGE_CPU, time.thread_time() - began - writing, step="window")
