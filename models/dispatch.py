"""Which device of the chosen class runs a route: the one this worker has routed least work to.

A policy picks a class; the class's executors share its route topic, each owning some of its
partitions (Kafka's consumer group assigns them, and every executor reports its share in its
heartbeats, ``route_partitions``). Keyed by workload id alone, a route landed on a partition —
so on an executor — drawn by the key's hash, busy or not: in the fleet simulation
(bench/fleetsim.py) that random dispatch within a class cost more than the choice of class.
Here the route goes to the partition of the device holding the least routed, unfinished work
(``models.backlog.Backlog`` per partition: charged when routed, released on completion), its
own least-loaded partition. Pure logic: no Kafka, no clock.
"""

from __future__ import annotations

from models.backlog import Backlog, Held
from models.registry import ClassView


def _load(held: Held, per_workload_ms: float) -> float:
    return held.ms + held.count * per_workload_ms


def route_partition(backlog: Backlog, view: ClassView, per_workload_ms: float = 0.0) -> int | None:
    """The route partition of ``view``'s class to send the next route to, or None when no live
    device has reported its partitions (then the key's hash decides, as before)."""
    best: tuple[float, int] | None = None  # (device load, partition); ties: the first device
    for _, partitions in view.route_partitions:
        if not partitions:
            continue  # more executors than partitions: this one has none to be sent to
        lanes = sorted((_load(backlog.lane(view.device_class, p), per_workload_ms), p)
                       for p in partitions)
        device_load = sum(load for load, _ in lanes)
        if best is None or device_load < best[0]:
            best = (device_load, lanes[0][1])
    return None if best is None else best[1]
