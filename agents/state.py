"""The worker's derived state: kept in memory, rebuilt from the tables on every assignment.

- ``backlog``: routed, unfinished work per class (models/backlog.py), the sum of the in-flight
  table's charges over this worker's partitions.
- ``recent``: the newest decisions per workload partition, for ``/api/decisions`` and the
  dashboard (a view, not state: a restarted worker starts it empty).

Neither has a table of its own: each cost a changelog record (and a store write) per workload,
and replaying those records was most of a restarted worker's recovery. Faust resumes the streams
only after the tables are recovered and ``on_rebalance_complete`` has been sent, so the rebuild
below sees the complete in-flight table of exactly the partitions this worker now owns.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from app.main import app, topics
from app.tables import inflight
from models.backlog import Backlog

logger = logging.getLogger(__name__)

DECISION_RING = 200  # recent decisions kept per workload partition

backlog = Backlog()
recent: dict[int, deque[dict[str, Any]]] = {}


def record_decision(partition: int, entry: dict[str, Any]) -> None:
    """Keep a decision in its partition's ring of recent decisions."""
    ring = recent.get(partition)
    if ring is None:
        ring = recent[partition] = deque(maxlen=DECISION_RING)
    ring.append(entry)


def recent_decisions() -> list[dict[str, Any]]:
    """Every kept decision, in no particular order."""
    return [entry for ring in recent.values() for entry in ring]


def assigned_workload_partitions() -> set[int]:
    """The workload partitions this worker owns now."""
    name = topics.workloads.get_topic_name()
    try:
        assigned = app.assignor.assigned_actives()
    except Exception:  # noqa: BLE001 - no assignment yet
        return set()
    return {tp.partition for tp in assigned if tp.topic == name}


def rebuild() -> None:
    """Derive the backlog from the in-flight table; forget the rings of partitions gone."""
    backlog.rebuild(inflight.values())
    owned = assigned_workload_partitions()
    for partition in list(recent):
        if partition not in owned:
            del recent[partition]
    logger.info("backlog rebuilt from the in-flight table: %s", backlog.by_class())


async def _on_rebalance_complete(sender: Any, **kwargs: Any) -> None:
    rebuild()


app.on_rebalance_complete.connect(_on_rebalance_complete)  # type: ignore[arg-type]

