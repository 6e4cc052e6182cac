"""Which device of the chosen class runs a route: the one this worker has routed least work to.

A policy picks a class; the class's executors share its route topic, each owning some of its
partitions (Kafka's consumer group assigns them, and every executor reports its share in its
heartbeats, ``route_partitions``). Keyed by workload id alone, a route landed on a partition —
so on an executor — drawn by the key's hash, busy or not: in the fleet simulation
(bench/fleetsim.py) that random dispatch within a class cost more than the choice of class.
Here the route goes to the partition of the device holding the least routed, unfinished work
(``models.backlog.Backlog`` per partition: charged when routed, released on completion), its
own least-loaded partition; ``device_wait_ms`` is the wait there, which the earliest-finish
policies charge a class (``Candidate.start_wait_ms``). Pure logic: no Kafka, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from models.backlog import Backlog, Held
from models.registry import ClassView


def _load(held: Held, per_workload_ms: float) -> float:
    return held.ms + held.count * per_workload_ms


def _least_loaded(backlog: Backlog, view: ClassView,
                  per_workload_ms: float) -> tuple[float, int, int, float | None] | None:
    """(routed ms, routed workloads, partition, when its oldest held workload was routed) of
    the class's least-loaded device: the one whose routed ms plus its workloads' dispatch
    overhead is least (ties: the first device), and its least-loaded partition.

    Remembered until the class's lanes or its devices' partitions change: a decision reads
    it for every live class, and only the class it routes to changes."""
    token = (backlog.lanes_version(view.device_class), view.route_partitions, per_workload_ms)
    memo = backlog.lane_memo.get(view.device_class)
    if memo is not None and memo[0] == token:
        return memo[1]
    found = _scan(backlog, view, per_workload_ms)
    backlog.lane_memo[view.device_class] = (token, found)
    return found


def _scan(backlog: Backlog, view: ClassView,
          per_workload_ms: float) -> tuple[float, int, int, float | None] | None:
    """`_least_loaded` without the memo: one pass over each device's partitions (a lane this
    worker never routed to holds nothing and is read as empty, not built)."""
    best: tuple[float, int, int, float | None] | None = None
    best_load = 0.0
    for _, partitions in view.route_partitions:
        if not partitions:
            continue  # more executors than partitions: this one has none to be sent to
        ms, count, oldest = 0.0, 0, None
        partition, partition_load = -1, 0.0
        for p, held in zip(partitions, backlog.lanes(view.device_class, partitions),
                           strict=True):
            load = 0.0
            if held is not None:
                ms += held.ms
                count += held.count
                load = _load(held, per_workload_ms)
                since = held.working_since_ms()
                if since is not None and (oldest is None or since < oldest):
                    oldest = since
            # the least-loaded partition; ties: the lowest partition
            if partition < 0 or load < partition_load or (load == partition_load
                                                          and p < partition):
                partition, partition_load = p, load
        load = ms + count * per_workload_ms
        if best is None or load < best_load:
            best, best_load = (ms, count, partition, oldest), load
    return best


def route_partition(backlog: Backlog, view: ClassView, per_workload_ms: float = 0.0) -> int | None:
    """The route partition of ``view``'s class to send the next route to, or None when no live
    device has reported its partitions (then the key's hash decides, as before)."""
    best = _least_loaded(backlog, view, per_workload_ms)
    return None if best is None else best[2]


def device_wait_ms(backlog: Backlog, view: ClassView, per_workload_ms: float = 0.0,
                   now_ms: float | None = None) -> float | None:
    """How long a route sent now would wait at the device `route_partition` picks: its routed
    work scaled by the class's pace (measured ÷ predicted) plus its workloads' dispatch
    overhead, less the time it has been working through them (since the later of the oldest
    one's routing and the last completion seen on it), plus the other workers' work on the
    class spread over its devices; None where unknown.

    The worker sees a completion only after its outcome's Kafka hops (100-250 ms at p50 in
    the EPYC's sim-fp32-load50 runs), so what a device holds *as the worker sees it* includes
    work it has finished. Counting only the dispatch overhead down (as this did from
    2026-12-04), the expected wait read 1.5-1.9x the queue the routes then met (93 ms
    against 76, 81 against 52 over a run's fifths); counting all of it down continuously,
    0.9-1.0x (42 against 43, 61 against 60), but in the fleet simulation (no Kafka: every
    completion seen as it happens) that cost switchyard and the oracle 1-3 % (15.1 → 15.6
    ms at 50 %): a greedy earliest-finish rule places better when the workload in progress
    counts in full. So whole workloads count down (as many of the device's average held
    workload as fit in the time since it started on them), the one in progress does not. A
    device slower than its model is covered by the pace, learned from every completion.

    The class's backlog over its instances (``Candidate.expected_wait_ms``) is the wait at an
    average device; the route goes to the least-loaded one, and an earliest-finish policy that
    charged the average moved work off large classes for waits it would not have (in the fleet
    simulation, 120 devices at 70 % load: 21.6 → 19.4 ms mean with this wait)."""
    best = _least_loaded(backlog, view, per_workload_ms)
    if best is None:
        return None
    routed_ms, routed_count, _, oldest = best
    pace = backlog.pace(view.device_class)
    own = routed_ms * pace + routed_count * per_workload_ms
    if now_ms is not None and oldest is not None and routed_count > 0 and own > 0.0:
        # Whole workloads predicted done since it started on them leave the wait; the one
        # predicted in progress stays in full, as it would until its completion is seen.
        item = own / routed_count
        own -= item * min(routed_count, math.floor(max(0.0, now_ms - oldest) / item))
    others = backlog.others_of(view.device_class)
    if others is None:
        return own
    instances = max(view.live_instances, 1)
    return own + (others.ms * pace + others.count * per_workload_ms) / instances


def core_sharing(classes: Mapping[str, ClassView]) -> dict[str, dict[str, float]]:
    """For each class whose pinned cores overlap other classes' (same host, same core), those
    classes and the share of each one's cores in common; classes that share nothing are
    absent. Classes that share a queue (`queue_sharing`) do not take turns on their cores:
    they are not counted here. A pure function of the live views: computed when they are
    read, not per decision.
    """
    out: dict[str, dict[str, float]] = {}
    for name, view in classes.items():
        if not view.cores:
            continue
        shares = {other_name: len(view.cores & other.cores) / len(other.cores)
                  for other_name, other in classes.items()
                  if other_name != name and other.cores and view.cores & other.cores
                  and not view.queues & other.queues}
        if shares:
            out[name] = shares
    return out


def queue_sharing(classes: Mapping[str, ClassView]) -> dict[str, dict[str, float]]:
    """For each class whose devices share a process's compute thread with other classes'
    (the same queue group, ``--runtime torch,jax,numpy``), those classes and the share of each
    one's live devices in a group in common (a process hosts one device of a class); absent
    where none. Their executions run one at a time in the
    order they arrived, so a workload sent to one waits for all the work queued on the others
    too (`colocated`), and delays none of it: nothing runs side by side."""
    out: dict[str, dict[str, float]] = {}
    for name, view in classes.items():
        shares = {other_name: min(1.0, len(view.queues & other.queues)
                                  / max(other.live_instances, 1))
                  for other_name, other in classes.items()
                  if other_name != name and view.queues & other.queues}
        if shares:
            out[name] = shares
    return out


def colocated(classes: Mapping[str, ClassView], sharing: Mapping[str, Mapping[str, float]],
              device_wait: Mapping[str, float | None], backlog_ms: Mapping[str, float],
              queued_with: Mapping[str, Mapping[str, float]] | None = None,
              ) -> tuple[dict[str, float | None], dict[str, float]]:
    """Each class's wait (``device_wait``, else its backlog over its instances) stretched by
    the classes whose pinned cores overlap its own (``sharing``, from `core_sharing`): while
    its own queue drains, each of them with work queued takes its turns on the shared cores,
    so the wait grows by that class's queued work up to the class's own wait, in the share of
    that class's cores they have in common; unchanged where no cores are shared.

    Executors pinned to one core each keep their own queue and take turns on the core (the
    kernel shares it between the runnable ones). Counted as separate devices, an idle class
    looked as fast beside a busy neighbour as alone. Counted as one queue (each class waiting
    for all the work on the core, as this did before), a workload sent to an idle executor
    was expected to wait for its neighbours' whole queue, where it started at once: in the
    live bf16 set JAX's executor held seconds of compilations while torch's and NumPy's
    started their work within milliseconds, and the router, seeing every class equally
    busy, kept sending work to JAX. A neighbour's queued work is its backlog, but no more
    than its device wait times its instances (its dispatch overhead counted down as the
    class's own wait counts it).

    Second, per class sharing cores: its neighbours' queued work on them (``busy``, ms, in
    the share of their cores in common; absent where none): the core is idle only when that
    is nothing too. The policy explores such a class only while its core is idle
    (models/policy.py::_explore_only_when_idle).

    Classes sharing a queue (``queued_with``, from `queue_sharing`) are one queue: the wait
    grows by each such neighbour's whole queued work, in the share of its devices in common.
    """
    out: dict[str, float | None] = dict(device_wait)
    busy: dict[str, float] = {}
    queued_with = queued_with or {}
    for name in sharing.keys() | queued_with.keys():
        own = _own_wait(name, classes, device_wait, backlog_ms)
        extra = held = 0.0
        for other, share in sharing.get(name, {}).items():
            queued_ms = _queued(other, classes, device_wait, backlog_ms)
            extra += min(queued_ms, own) * share
            held += queued_ms * share
        for other, share in queued_with.get(name, {}).items():
            queued_ms = _queued(other, classes, device_wait, backlog_ms)
            extra += queued_ms * share
            held += queued_ms * share
        if extra > 0.0:
            out[name] = own + extra
        if held > 0.0:
            busy[name] = held
    return out, busy


def _queued(name: str, classes: Mapping[str, ClassView], device_wait: Mapping[str, float | None],
            backlog_ms: Mapping[str, float]) -> float:
    """A class's queued work (`colocated`): its backlog, but no more than its device wait times
    its instances."""
    held = max(backlog_ms.get(name, 0.0), 0.0)
    wait = device_wait.get(name)
    view = classes.get(name)
    if wait is None or view is None:
        return held
    return min(held, max(wait, 0.0) * max(view.live_instances, 1))


def _own_wait(name: str, classes: Mapping[str, ClassView], device_wait: Mapping[str, float | None],
              backlog_ms: Mapping[str, float]) -> float:
    """A class's own wait before any neighbour's turns: its device wait, else its backlog over
    its instances."""
    own = device_wait.get(name)
    if own is None:
        own = max(backlog_ms.get(name, 0.0), 0.0) / max(classes[name].live_instances, 1)
    return own


def core_left(classes: Mapping[str, ClassView], sharing: Mapping[str, Mapping[str, float]],
              device_wait: Mapping[str, float | None], backlog_ms: Mapping[str, float],
              backlog_count: Mapping[str, int]) -> dict[str, tuple[tuple[float, float], ...]]:
    """Per class sharing cores, each neighbour still holding work when the class's own queue
    has drained: (that work, ms, in the share of the neighbour's cores in common; how many of
    its workloads it is, in proportion to the ms). What a workload sent to the class runs
    beside (`shared_core_ms`); absent where there is none.

    While the class works through its own queue, each neighbour gets the same turns on the
    shared core (the kernel shares it between runnable executors), so a neighbour with ``q``
    ms queued has ``q`` less the class's own wait left by then. ``backlog_count``: the
    workloads each class holds (``Backlog.count``)."""
    out: dict[str, tuple[tuple[float, float], ...]] = {}
    for name, shares in sharing.items():
        own = _own_wait(name, classes, device_wait, backlog_ms)
        left = []
        for other, share in shares.items():
            queued_ms = _queued(other, classes, device_wait, backlog_ms)
            after = queued_ms - max(own, 0.0)
            count = backlog_count.get(other, 0)
            if after > 0.0 and count > 0:
                left.append((after * share, count * after / queued_ms))
        if left:
            out[name] = tuple(left)
    return out


def shared_core_ms(left: tuple[tuple[float, float], ...], occupancy_ms: float) -> tuple[float, float]:
    """What running ``occupancy_ms`` of work on a shared core beside its neighbours' work
    ``left`` (`core_left`) costs: (how much later it finishes than alone — each neighbour
    takes a turn for every one of its own, up to the work it has left —; how much later the
    neighbours' workloads finish in all — each of them still queued is pushed back by the
    turns it gives up, up to that work).

    An earliest-finish choice counts only the first: on one core shared by three executors,
    a workload sent to an idle executor beside a busy one finished sooner than behind it,
    but delayed every workload queued on the busy one by as much, and the live sets' mean
    completion is the sum of both (issue 13: Switchyard 1.35x always-torch on live fp32, with
    its executions 46 ms against 29 ms side by side)."""
    stretch = delay = 0.0
    occupancy_ms = max(occupancy_ms, 0.0)
    for after_ms, count in left:
        stretch += min(after_ms, occupancy_ms)
        # The neighbour's workloads, spread evenly over its work left, finish alone at
        # after·k/n (k = 1..n); each finishes later by the turns it gives up before then:
        # min(after·k/n, occupancy).
        n = max(1, round(count))
        step = after_ms / n
        within = min(n, math.floor(occupancy_ms / step)) if step > 0.0 else n
        delay += (step * within * (within + 1) / 2 + (n - within) * occupancy_ms) * count / n
    return stretch, delay
