"""The worker's derived state: kept in memory, rebuilt from the tables on every assignment.

- ``book``: routed, unfinished workloads (models/inflight.py), indexed by workload id, over
  the ``inflight`` table's batches; ``add_inflight``, ``write_inflight`` and
  ``close_inflight`` keep the two in step (one table write per decide batch and partition,
  one delete when the batch's last workload finished).
- ``backlog``: routed, unfinished work per class (models/backlog.py), the sum of the in-flight
  table's charges over this worker's partitions.
- ``handling``: each class's learned handling around the execution (models/handling.py),
  from the outcomes this worker completes; kept across rebuilds (it is about the executors,
  not the partitions), learned again after a restart.
- ``recent``: the newest decisions per workload partition, for ``/api/decisions`` and the
  dashboard (a view, not state: a restarted worker starts it empty).
- ``shapes`` and ``last_routed``: the distinct shapes routed lately and when each class was
  last routed work, what idle probes imitate and wait for (agents/probe.py; a view too).

The backlog's totals are also published, every ``SHARE_PERIOD_S``, to the global
``backlog_shares`` table under this worker's id, and the other workers' fresh shares are added
to every class's wait (models/backlog.py): two workers deciding for one fleet each see the
whole queue of a class, not half of it.

Neither has a table of its own: each cost a changelog record (and a store write) per workload,
and replaying those records was most of a restarted worker's recovery. Faust resumes the streams
only after the tables are recovered and ``on_rebalance_complete`` has been sent, so the rebuild
below sees the complete in-flight table of exactly the partitions this worker now owns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from app.faust_patches import CoordinatorWatch
from app.main import app, settings, topics
from app.streaming import PartitionWrite, assigned_partitions, event_context, now_ms
from app.tables import backlog_shares, completed, inflight
from models.backlog import Backlog, BacklogShare, InflightEntry, merge_shares
from models.handling import Handling
from models.inflight import InflightBook
from models.probing import RecentShapes
from models.routing import decision_view
from models.workload import Workload

logger = logging.getLogger(__name__)

DECISION_RING = 200  # recent decisions kept per workload partition
# How often a worker publishes its backlog share and reads the others'; a share is
# republished at least every SHARE_REFRESH_S even unchanged, and one older than
# SHARE_STALE_S (its worker stopped or died) is not counted.
SHARE_PERIOD_S = 0.2
SHARE_REFRESH_S = 1.0
SHARE_STALE_S = 5.0
WORKER_ID = settings.worker_instance_id() or f"{socket.gethostname()}-{os.getpid()}"

backlog = Backlog()
book = InflightBook()
handling = Handling()
# Stored batches found empty at a rebuild, deleted by the next timer turn (not while Faust is
# still completing the rebalance).
_garbage: list[tuple[str, int]] = []
# Twice the group session timeout (app/main.py): a coordinator unknown that long is stuck.
coordinator_watch = CoordinatorWatch(after_s=2 * app.conf.broker_session_timeout)
recent: dict[int, deque[dict[str, Any]]] = {}
shapes = RecentShapes()
last_routed: dict[str, float] = {}  # device class -> time.monotonic() of its last route


def _nothing_to_settle(workload_id: str, held_ms: float) -> None:
    return None


# Told each completed workload's measured hold (the complete stage): the decide stage's
# policy's ``settle`` where it has one (agents/decide.py; models/policy.py).
settle: Callable[[str, float], None] = _nothing_to_settle


def note_route(workload: Workload, device_class: str) -> None:
    """Where idle probes are on, remember the routed workload's shape and when its class was
    last given work (nothing else reads either)."""
    if settings.idle_probing:
        shapes.add(workload)
        last_routed[device_class] = time.monotonic()


def record_decision(partition: int, route: dict[str, Any]) -> None:
    """Keep a route's fields in its partition's ring of recent decisions (the view of it is
    built when read: most are pushed out of the ring unread)."""
    ring = recent.get(partition)
    if ring is None:
        ring = recent[partition] = deque(maxlen=DECISION_RING)
    ring.append(route)


def recent_decisions() -> list[dict[str, Any]]:
    """Every kept decision (models/routing.py::decision_view), in no particular order."""
    return [decision_view(route) for ring in recent.values() for route in ring]


def assigned_workload_partitions() -> set[int]:
    """The workload partitions this worker owns now."""
    return assigned_partitions(topics.workloads.get_topic_name())


def rebuild() -> None:
    """Derive the in-flight book and the backlog from the in-flight table; forget the rings of
    partitions gone."""
    _garbage[:] = book.rebuild(list(inflight.items()), lambda wid: wid.encode() in completed)
    backlog.rebuild(book.entries())
    owned = assigned_workload_partitions()
    for partition in list(recent):
        if partition not in owned:
            del recent[partition]
    logger.info("backlog rebuilt from the in-flight table: %s", backlog.by_class())


async def _on_rebalance_complete(sender: Any, **kwargs: Any) -> None:
    rebuild()


app.on_rebalance_complete.connect(_on_rebalance_complete)  # type: ignore[arg-type]



def partition_write(partition: int = 0) -> PartitionWrite:
    """The current event of a write that belongs to a workload partition (a share's write from
    a timer; an in-flight batch written after a decide batch that mixed partitions), or of a
    read of one outside that partition's events: these tables are partitioned like the
    workloads topic."""
    return PartitionWrite(topics.workloads.get_topic_name(), partition)


def add_inflight(key: str, partition: int, workload_id: str, entry: InflightEntry,
                 previous: InflightEntry | None = None) -> None:
    """A route was sent: hold its entry in batch ``key`` and charge the backlog (releasing
    ``previous``, the entry of an earlier route of the same workload). The table is written
    by ``write_inflight`` once the batch is routed."""
    _drop(book.add(key, partition, workload_id, entry))
    if previous:
        backlog.remove_entry(previous)
    backlog.add_entry(entry)


def write_inflight(key: str) -> None:
    """Store batch ``key``'s open entries: one changelog record for the whole batch."""
    value = book.value(key)
    if not value:
        return  # every workload of it finished already
    with event_context(partition_write(book.partition(key))):
        inflight[key] = value
    book.mark_written(key)


def close_inflight(workload_id: str, now: float | None = None) -> InflightEntry | None:
    """A workload finished: forget its entry and its backlog charge (seen finished at
    ``now``); delete its batch once nothing in it is open. Its entry, or None."""
    entry, emptied = book.close(workload_id)
    if entry is not None:
        backlog.remove_entry(entry, now)
    _drop(emptied)
    return entry


def _drop(batches: list[tuple[str, int]]) -> None:
    for key, partition in batches:
        # KeyError: not in this worker's store (already deleted); the tombstone is sent anyway.
        with event_context(partition_write(partition)), contextlib.suppress(KeyError):
            del inflight[key]


def drop_garbage() -> None:
    """Delete the stored batches the last rebuild found empty."""
    if _garbage and worker_ready():
        batches, _garbage[:] = list(_garbage), []
        _drop(batches)


_published: dict[str, Any] = {"classes": None, "at": 0.0}


def worker_ready() -> bool:
    """Partitions assigned, tables recovered, no rebalance under way."""
    try:
        # The table manager has a recovery service; its declared type (TableManagerT) does not.
        recovered = app.tables.recovery.completed.is_set()  # type: ignore[attr-defined]
        assigned = bool(app.consumer.assignment())
    except Exception:  # noqa: BLE001 - not started yet
        return False
    return recovered and assigned and not app.rebalancing


def publish_share() -> bool:
    """Write this worker's backlog totals to ``backlog_shares`` when they changed or the last
    write is SHARE_REFRESH_S old; whether it wrote."""
    if not worker_ready():
        return False  # the tables are being recovered or the partitions are moving
    share = backlog.share()
    now = time.monotonic()
    if share == _published["classes"] and now - _published["at"] < SHARE_REFRESH_S:
        return False
    write = partition_write()
    with event_context(write):
        value: BacklogShare = {"worker": WORKER_ID, "at_ms": now_ms(), "classes": share}
        backlog_shares[WORKER_ID] = value
    _published.update(classes=share, at=now)
    return True


def read_others() -> None:
    """Count the other workers' fresh shares in this worker's backlog."""
    backlog.set_others(merge_shares(backlog_shares.values(), WORKER_ID, now_ms(),
                                    SHARE_STALE_S * 1000.0))


@app.timer(interval=SHARE_PERIOD_S)
async def share_backlog() -> None:
    """Publish this worker's share of every class's backlog; read the others'."""
    try:
        publish_share()
        read_others()
        drop_garbage()
    except Exception as exc:  # noqa: BLE001 - a missed share costs accuracy, never the worker
        logger.warning("backlog share not exchanged: %r", exc)


@app.timer(interval=5.0)
async def watch_coordinator() -> None:
    """Report (and wake) a consumer whose group coordinator stays unknown (app/faust_patches.py)."""
    try:
        coordinator_watch.check(app, time.monotonic())
    except Exception as exc:  # noqa: BLE001 - a watch must never take the worker down
        logger.warning("coordinator watch failed: %r", exc)
