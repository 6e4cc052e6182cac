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
    work scaled by the class's pace (measured ÷ predicted), plus its workloads' dispatch
    overhead less the time it has been working through them (since the later of the oldest
    one's routing and the last completion seen on it: the worker sees a completion only a
    Kafka hop later, and a sub-millisecond op finished 15 ms ago still charged 8 ms of
    overhead made an idle fast device look busier than a slow idle one), plus the other
    workers' work on the class spread over its devices; None where unknown.

    The class's backlog over its instances (``Candidate.expected_wait_ms``) is the wait at an
    average device; the route goes to the least-loaded one, and an earliest-finish policy that
    charged the average moved work off large classes for waits it would not have (in the fleet
    simulation, 120 devices at 70 % load: 21.6 → 19.4 ms mean with this wait)."""
    best = _least_loaded(backlog, view, per_workload_ms)
    if best is None:
        return None
    routed_ms, routed_count, _, oldest = best
    pace = backlog.pace(view.device_class)
    overhead = routed_count * per_workload_ms
    if now_ms is not None and oldest is not None:
        # Only the dispatch overhead counts down: the predicted work stays in full, so a device
        # slower than its model (pace) or than the clock says is never taken for idle.
        overhead = max(0.0, overhead - max(0.0, now_ms - oldest))
    own = routed_ms * pace + overhead
    others = backlog.others_of(view.device_class)
    if others is None:
        return own
    instances = max(view.live_instances, 1)
    return own + (others.ms * pace + others.count * per_workload_ms) / instances


def core_sharing(classes: Mapping[str, ClassView]) -> dict[str, dict[str, float]]:
    """For each class whose pinned cores overlap other classes' (same host, same core), those
    classes and the share of each one's cores in common; classes that share nothing are
    absent. A pure function of the live views: computed when they are read, not per decision.
    """
    out: dict[str, dict[str, float]] = {}
    for name, view in classes.items():
        if not view.cores:
            continue
        shares = {other_name: len(view.cores & other.cores) / len(other.cores)
                  for other_name, other in classes.items()
                  if other_name != name and other.cores and view.cores & other.cores}
        if shares:
            out[name] = shares
    return out


def colocated(classes: Mapping[str, ClassView], sharing: Mapping[str, Mapping[str, float]],
              device_wait: Mapping[str, float | None], backlog_ms: Mapping[str, float],
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
    """
    def queued(name: str) -> float:
        held = max(backlog_ms.get(name, 0.0), 0.0)
        wait = device_wait.get(name)
        view = classes.get(name)
        if wait is None or view is None:
            return held
        return min(held, max(wait, 0.0) * max(view.live_instances, 1))

    out: dict[str, float | None] = dict(device_wait)
    busy: dict[str, float] = {}
    for name, shares in sharing.items():
        own = out.get(name)
        if own is None:
            own = max(backlog_ms.get(name, 0.0), 0.0) / max(classes[name].live_instances, 1)
        extra = held = 0.0
        for other, share in shares.items():
            queued_ms = queued(other)
            extra += min(queued_ms, own) * share
            held += queued_ms * share
        if extra > 0.0:
            out[name] = own + extra
        if held > 0.0:
            busy[name] = held
    return out, busy
