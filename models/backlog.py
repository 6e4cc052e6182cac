"""Routed, unfinished work per device class: derived state, kept in memory.

The source of truth is the in-flight table (one entry per routed, unfinished workload, with the
milliseconds its class was charged). The backlog is the sum of those charges per class; it is
kept as a running total while the worker decides and completes, and rebuilt from the in-flight
entries whenever the worker's partitions change (agents/state.py). Writing it to a table of its
own cost two changelog records per workload and most of the replay after a restart.

Each worker holds only its own partitions' in-flight work; executors serve every worker's
routes. So each worker also publishes its per-class totals (its *share*) and adds the other
workers' fresh shares to its own when it computes a class's wait (``set_others``): N workers
see one backlog, a few hundred milliseconds old for the others' part (agents/state.py).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict


class InflightEntry(TypedDict, total=False):
    """The ``inflight`` table's value (app/tables.py; key = workload id): one routed, unfinished
    workload. Written by decide (``models.routing.inflight_entry``); read by complete, the
    re-route path and the backlog (``Backlog.add_entry``, ``rebuild``)."""

    device_class: str
    variant: dict[str, Any]
    predicted_ms: float
    charged_ms: float  # execution + setup + transfer + handling; older entries may lack it
    decided_at_ms: int
    attempt: int
    partition: int  # the workload record's partition and offset (a redelivery is told apart)
    offset: int | None
    workload: dict[str, Any]
    route_partition: int  # only when routed to an explicit partition (models/dispatch.py)
    io_bytes: int  # the bytes it moves in and out (models/handling.py); older entries lack it


class BacklogShare(TypedDict):
    """The ``backlog_shares`` table's value (key = worker id): one worker's totals per class."""

    worker: str
    at_ms: int
    classes: dict[str, dict[str, float]]


# How fast a class's pace follows its completions (weight of the newest), and how far it may
# stray from the predictions (a ratio outside this is a model that has not learned yet, or a
# broken measurement: it is held at the bound rather than trusted).
PACE_ALPHA = 0.1
PACE_BOUNDS = (0.25, 8.0)


def charge_of(entry: Mapping[str, Any]) -> float:
    """The backlog ms an in-flight entry was charged when routed (execution plus the setup of
    a cold shape); entries written before setup costs carry only the prediction."""
    return float(entry.get("charged_ms", entry.get("predicted_ms", 0.0)) or 0.0)


@dataclass
class Held:
    """One class's routed, unfinished work: predicted ms and number of workloads."""

    ms: float = 0.0
    count: int = 0
    # When the held workloads were routed (decided_at_ms -> how many): the oldest one bounds
    # how long the device has been working through them (``models.dispatch.device_wait_ms``).
    routed_at: dict[float, int] = field(default_factory=dict)
    # When a held workload was last seen to finish (None: not since the last rebuild).
    released_ms: float | None = None
    # The times of ``routed_at`` as a heap (entries whose count fell to zero are dropped when
    # they reach the top): the oldest in O(log n), where a scan of thousands of in-flight
    # routing times per decision made a burst quadratic.
    _times: list[float] = field(default_factory=list, repr=False, compare=False)

    def route(self, at: float, sign: int) -> None:
        """Count one workload routed at ``at`` in (sign 1) or out (sign -1)."""
        left = self.routed_at.get(at, 0) + sign
        if left > 0:
            if at not in self.routed_at:
                heapq.heappush(self._times, at)
            self.routed_at[at] = left
        else:
            self.routed_at.pop(at, None)
            if len(self._times) > 2 * len(self.routed_at) + 64:  # dropped times pile up
                self._times = sorted(self.routed_at)

    def working_since_ms(self) -> float | None:
        """Since when the device has been working through what it holds, at the latest: the
        later of the oldest held workload's routing and the last completion seen (before
        that it was busy with work since released). None: nothing held, or not known."""
        times = self._times
        while times and times[0] not in self.routed_at:
            heapq.heappop(times)
        if not times:
            return None
        oldest = times[0]
        return oldest if self.released_ms is None else max(oldest, self.released_ms)

    def as_dict(self) -> dict[str, float]:
        return {"ms": self.ms, "count": self.count}


class Backlog:
    """Per-class running totals of in-flight charges.

    A class once seen keeps its (possibly zero) entry until the next rebuild, so views list
    every class this worker has routed to.
    """

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        # The same charges per (class, route partition), for entries routed to an explicit
        # partition (``route_partition``): which of a class's devices has the least work.
        self._lanes: dict[tuple[str, int], Held] = {}
        self._log_pace: dict[str, float] = {}
        # The other workers' fresh shares, summed per class (``set_others``).
        self._others: dict[str, Held] = {}
        # How often each class's lanes changed (and rebuilds): what a derived view of the
        # lanes (models/dispatch.py) is valid for, and that view's memo.
        self._lane_changes: dict[str, int] = {}
        self._epoch = 0
        self.lane_memo: dict[str, tuple[Any, Any]] = {}

    def add(self, device_class: str, ms: float, count: int = 1) -> None:
        """Charge (or, with negative numbers, release) work to a class; never below zero."""
        held = self._held.setdefault(device_class, Held())
        held.ms = max(0.0, held.ms + ms)
        held.count = max(0, held.count + count)

    def add_entry(self, entry: Mapping[str, Any]) -> None:
        """Charge the work of one in-flight entry."""
        self._add_entry(entry, 1)

    def remove_entry(self, entry: Mapping[str, Any], now_ms: float | None = None) -> None:
        """Release the work of one in-flight entry (it finished — seen at ``now_ms`` —, or was
        routed elsewhere)."""
        self._add_entry(entry, -1, now_ms)

    def _add_entry(self, entry: Mapping[str, Any], sign: int,
                   now_ms: float | None = None) -> None:
        device_class = str(entry["device_class"])
        self.add(device_class, sign * charge_of(entry), sign)
        lane = entry.get("route_partition")
        if isinstance(lane, int) and not isinstance(lane, bool):
            self._lane_changes[device_class] = self._lane_changes.get(device_class, 0) + 1
            held = self._lanes.setdefault((device_class, lane), Held())
            held.ms = max(0.0, held.ms + sign * charge_of(entry))
            held.count = max(0, held.count + sign)
            at = entry.get("decided_at_ms")
            if isinstance(at, int | float) and not isinstance(at, bool):
                held.route(float(at), sign)
            if sign < 0 and now_ms is not None:
                held.released_ms = now_ms

    def lane(self, device_class: str, partition: int) -> Held:
        """This worker's work routed to one partition of a class's route topic."""
        return self._lanes.get((device_class, partition)) or Held()

    def lanes(self, device_class: str, partitions: Iterable[int]) -> list[Held | None]:
        """This worker's work on each of the given partitions of a class (None: never routed
        to since the last rebuild); read-only."""
        get = self._lanes.get
        return [get((device_class, p)) for p in partitions]

    def lanes_version(self, device_class: str) -> tuple[int, int]:
        """Changes whenever a lane of ``device_class`` does."""
        return self._epoch, self._lane_changes.get(device_class, 0)

    def rebuild(self, entries: Iterable[Mapping[str, Any] | None]) -> None:
        """Start again from the given in-flight entries (the worker's partitions changed)."""
        self._held = {}
        self._lanes = {}
        self._epoch += 1
        for entry in entries:
            if entry and entry.get("device_class"):
                self.add_entry(entry)

    def ms(self, device_class: str, per_workload_ms: float = 0.0) -> float:
        """Expected ms of a class's unfinished work: the predicted ms charged for it scaled by
        the class's pace (how long its work has really taken per predicted ms), plus
        ``per_workload_ms`` for each workload (the executor's dispatch overhead outside the
        measured execution)."""
        held = self._held.get(device_class)
        other = self._others.get(device_class)
        if held is None and other is None:
            return 0.0
        ms = (held.ms if held else 0.0) + (other.ms if other else 0.0)
        count = (held.count if held else 0) + (other.count if other else 0)
        return ms * self.pace(device_class) + count * per_workload_ms

    def count(self, device_class: str) -> int:
        """How many unfinished workloads a class holds: this worker's and (as last set) the
        other workers'."""
        held, other = self._held.get(device_class), self._others.get(device_class)
        return (held.count if held else 0) + (int(other.count) if other else 0)

    def share(self) -> dict[str, dict[str, float]]:
        """This worker's own totals per class, as published for the other workers."""
        return {c: h.as_dict() for c, h in sorted(self._held.items())}

    def set_others(self, others: Mapping[str, Held]) -> None:
        """The other workers' work per class (``merge_shares``), counted in every wait."""
        self._others = dict(others)

    def others_of(self, device_class: str) -> Held | None:
        """The other workers' work on one class as last set."""
        return self._others.get(device_class)

    def others(self) -> dict[str, dict[str, float]]:
        """The other workers' work per class as last set."""
        return {c: h.as_dict() for c, h in sorted(self._others.items())}

    def observe(self, device_class: str, charged_ms: float, measured_ms: float) -> None:
        """A finished workload of the class: charged ``charged_ms`` when routed, it took
        ``measured_ms`` (execution plus any setup) on the executor."""
        if not (charged_ms > 0.0 and measured_ms > 0.0
                and math.isfinite(charged_ms) and math.isfinite(measured_ms)):
            return
        low, high = PACE_BOUNDS
        step = math.log(min(max(measured_ms / charged_ms, low), high))
        current = self._log_pace.get(device_class)
        self._log_pace[device_class] = (step if current is None
                                        else current + PACE_ALPHA * (step - current))

    def pace(self, device_class: str) -> float:
        """Measured ÷ predicted time of the class's recent work (geometric mean, recent
        completions weighted most; 1.0 before any): a class running slower than its model
        predicts holds proportionally more waiting work than its charges add up to.

        A class with nothing finished yet takes the smallest pace of those that have, when
        every one of them runs slower than charged (a roofline prior optimistic on every
        device alike): at 1.0 it looked idle behind work that would take it several times
        longer (issue 13, sim-fp32 set)."""
        log_pace = self._log_pace.get(device_class)
        if log_pace is None:
            log_pace = max(0.0, min(self._log_pace.values(), default=0.0))
        return math.exp(log_pace)

    def by_class(self) -> dict[str, dict[str, float]]:
        """``{class: {"ms": predicted ms, "count": workloads, "pace": measured ÷ predicted,
        "others_ms", "others_count": the other workers' share}}`` for every class seen here
        or in the others' shares (a worker holding none of a class's work still shows what it
        waits on behind the others')."""
        empty = Held()
        return {c: {**self._held.get(c, empty).as_dict(), "pace": self.pace(c),
                    "others_ms": self._others.get(c, empty).ms,
                    "others_count": self._others.get(c, empty).count}
                for c in sorted({*self._held, *self._others})}

    def holds_work(self, device_class: str) -> bool:
        """Whether a class has unfinished work routed by this worker or (as last set) by the
        others: by count, since the predicted ms left after releases are float residue."""
        held, other = self._held.get(device_class), self._others.get(device_class)
        return bool((held and held.count > 0) or (other and other.count > 0))

    def busy_classes(self) -> set[str]:
        """Classes holding at least one unfinished workload."""
        return {c for c, h in self._held.items() if h.count > 0}


def merge_shares(shares: Iterable[Mapping[str, Any] | None], me: str, now_ms: float,
                 stale_ms: float) -> dict[str, Held]:
    """The other workers' work per class: the sum of every share published by a worker other
    than ``me`` within ``stale_ms`` (a worker that died stops refreshing its share, and its
    partitions' work is counted again by whoever rebuilds it). Malformed shares are skipped."""
    out: dict[str, Held] = {}
    for share in shares:
        if not isinstance(share, Mapping) or share.get("worker") == me:
            continue
        at = share.get("at_ms")
        if not isinstance(at, int | float) or now_ms - float(at) > stale_ms:
            continue
        classes = share.get("classes")
        if not isinstance(classes, Mapping):
            continue
        for device_class, held in classes.items():
            if not isinstance(held, Mapping):
                continue
            ms, count = held.get("ms"), held.get("count")
            if not isinstance(ms, int | float) or not isinstance(count, int | float):
                continue
            if not (math.isfinite(ms) and ms >= 0.0 and count >= 0):
                continue
            total = out.setdefault(str(device_class), Held())
            total.ms += float(ms)
            total.count += int(count)
    return out
