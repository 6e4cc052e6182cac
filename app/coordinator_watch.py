"""Noticing an aiokafka consumer whose group coordinator stays unknown, and waking it.

After a broker SIGKILL (tests/reliability/test_broker_faults.py, about one CI run in five),
aiokafka marked a consumer's group coordinator dead, its coordination routine logged one
failed lookup and never another, and the consumer client's metadata updates stopped while the
producer's went on: the consumer went on fetching but committed nothing more. Seen first in the
worker's Faust consumer; in stop 41's failed run the same one-failed-lookup-then-silence showed
in an executor's plain consumer, which then ran nothing more (its commits wait for the
coordinator) and never stopped cleanly.

``CoordinatorWatch`` measures how long the coordinator has been unknown; past ``after_s`` it
logs the metadata machinery's state and every task's await chain, and — if the client's
metadata synchronizer died, or sleeps while a forced update waits for it — restarts or wakes
it, so the pending lookup goes on. It never touches a consumer whose coordinator is known. It
reads aiokafka's private state (``_coordinator.coordinator_id``, ``_coordinator_lookup_lock``,
the client's ``_sync_task``, ``_md_update_fut``, ``_md_update_waiter``, ``_md_synchronizer``),
checked against the aiokafka the project pins (tests/app/test_faust_patches.py). The worker
runs it from its timer against the consumer in Faust's consumer thread
(``app.faust_patches.CoordinatorWatch.check``); an executor from its heartbeat loop, on its own
consumer (``check_here``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger(__name__)


def await_chain(coro: Any) -> list[str]:
    """The frames a suspended coroutine waits in, outermost first (``cr_await`` followed down
    to the future it waits on; ``Task.get_stack`` gives only the outermost frame)."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def task_stacks(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Every pending task of ``loop`` with the frames it is suspended in (call in ``loop``)."""
    return sorted(f"{task.get_name()}: {' > '.join(await_chain(task.get_coro())) or '-'}"
                  for task in asyncio.all_tasks(loop))


def metadata_state(client: Any) -> dict[str, Any]:
    """The aiokafka client's metadata machinery: a pending forced update nobody serves is how
    a consumer can stop looking for its group coordinator (see ``CoordinatorWatch``)."""
    sync_task, fut, waiter = client._sync_task, client._md_update_fut, client._md_update_waiter
    return {
        "sync_task_done": sync_task is None or sync_task.done(),
        "sync_task_error": (repr(sync_task.exception()) if sync_task is not None
                            and sync_task.done() and not sync_task.cancelled() else None),
        "update_pending": fut is not None and not fut.done(),
        "waiter_done": waiter.done(),
    }


class CoordinatorWatch:
    """Notices a consumer's group coordinator staying unknown, says where the consumer is
    stuck, and wakes what can be woken (see the module)."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.unknown_since: float | None = None
        self.reports = 0

    def due(self, consumer: Any, now: float) -> bool:
        """True when ``consumer``'s coordinator has been unknown longer than ``after_s`` (then
        counted as a report; the next one only after another ``after_s``)."""
        coordinator = getattr(consumer, "_coordinator", None)
        if coordinator is None or coordinator.coordinator_id is not None:
            self.unknown_since = None
            return False
        if self.unknown_since is None:
            self.unknown_since = now
        if now - self.unknown_since < self.after_s:
            return False
        self.reports += 1
        self.unknown_since = now  # the next report, if still stuck, after another after_s
        return True

    def check_here(self, consumer: Any, now: float) -> bool:
        """``due``, and then the report and the wake-up at once: for a consumer on the
        running loop (an executor's)."""
        if not self.due(consumer, now):
            return False
        self.report_and_wake(consumer, asyncio.get_running_loop())
        return True

    def report_and_wake(self, consumer: Any, loop: asyncio.AbstractEventLoop) -> None:
        """In the consumer's loop: log where it is, then wake the metadata synchronizer."""
        client = consumer._client
        state = metadata_state(client)
        logger.warning("group coordinator unknown for over %.0f s (report %d); consumer "
                       "metadata %s; lookup lock held: %s; tasks:\n  %s", self.after_s,
                       self.reports, state, consumer._coordinator._coordinator_lookup_lock.locked(),
                       "\n  ".join(task_stacks(loop)))
        if state["sync_task_done"]:
            logger.warning("restarting the consumer client's metadata synchronizer")
            client._sync_task = loop.create_task(client._md_synchronizer())
        elif state["update_pending"] and not state["waiter_done"]:
            logger.warning("waking the consumer client's metadata synchronizer")
            client._md_update_waiter.set_result(None)
