"""Dispatch within a class (models/dispatch.py) and the per-partition backlog it reads."""

from __future__ import annotations

from models.backlog import Backlog
from models.dispatch import (
    colocated,
    core_left,
    core_sharing,
    queue_sharing,
    route_partition,
    shared_core_ms,
)
from models.registry import ClassView, live_classes


def _view(*devices: tuple[str, tuple[int, ...]]) -> ClassView:
    return ClassView("sim-h100", len(devices), route_partitions=tuple(devices))


def _entry(partition: int | None, ms: float) -> dict:
    entry = {"device_class": "sim-h100", "predicted_ms": ms, "charged_ms": ms}
    if partition is not None:
        entry["route_partition"] = partition
    return entry


def test_without_reported_partitions_the_key_decides() -> None:
    assert route_partition(Backlog(), ClassView("sim-h100", 2)) is None
    assert route_partition(Backlog(), _view(("a", ()), ("b", ()))) is None


def test_the_device_with_least_routed_work_gets_the_route_on_its_least_loaded_partition() -> None:
    backlog = Backlog()
    view = _view(("a", (0, 1)), ("b", (2, 3)))
    assert route_partition(backlog, view) == 0  # all idle: the first device
    backlog.add_entry(_entry(0, 30.0))
    assert route_partition(backlog, view) == 2  # a holds 30 ms, b nothing
    backlog.add_entry(_entry(2, 10.0))
    backlog.add_entry(_entry(3, 10.0))
    assert route_partition(backlog, view) == 2  # b holds 20 < 30; its partitions tie: the first
    backlog.add_entry(_entry(2, 15.0))  # b: 35 > a: 30 -> a, on its idle partition 1
    assert route_partition(backlog, view) == 1


def test_counted_dispatch_overhead_prefers_fewer_queued_workloads() -> None:
    backlog = Backlog()
    view = _view(("a", (0,)), ("b", (1,)))
    for _ in range(5):
        backlog.add_entry(_entry(0, 1.0))  # five tiny ops: 5 ms
    backlog.add_entry(_entry(1, 8.0))  # one 8 ms op
    assert route_partition(backlog, view) == 0
    assert route_partition(backlog, view, per_workload_ms=2.0) == 1  # 15 ms vs 10 ms


def test_lanes_are_released_with_their_entries_and_rebuilt_from_the_in_flight_table() -> None:
    backlog = Backlog()
    routed, unpartitioned = _entry(1, 12.0), _entry(None, 5.0)
    backlog.add_entry(routed)
    backlog.add_entry(unpartitioned)
    assert backlog.lane("sim-h100", 1).ms == 12.0 and backlog.lane("sim-h100", 1).count == 1
    assert backlog.ms("sim-h100") == 17.0
    backlog.remove_entry(routed)
    assert backlog.lane("sim-h100", 1).count == 0 and backlog.ms("sim-h100") == 5.0
    backlog.rebuild([_entry(2, 4.0), None])
    assert backlog.lane("sim-h100", 2).ms == 4.0 and backlog.lane("sim-h100", 1).ms == 0.0


def test_live_classes_carry_each_devices_reported_partitions() -> None:
    now = 1_000_000
    devices = [
        {"device_id": "b", "device_class": "sim-h100", "last_seen_ms": now, "route_partitions": [3, 2]},
        {"device_id": "a", "device_class": "sim-h100", "last_seen_ms": now, "route_partitions": [0, 1]},
        {"device_id": "c", "device_class": "sim-h100", "last_seen_ms": now},  # an older executor
        {"device_id": "d", "device_class": "sim-h100", "last_seen_ms": now,
         "route_partitions": ["x"]},  # not partitions: ignored
    ]
    view = live_classes(devices, now, 5.0)["sim-h100"]
    assert view.route_partitions == (("a", (0, 1)), ("b", (2, 3)))
    assert view.live_instances == 4


def test_the_device_wait_is_the_least_loaded_devices_work_at_the_class_pace() -> None:
    from models.backlog import Held
    from models.dispatch import device_wait_ms

    backlog = Backlog()
    view = _view(("a", (0,)), ("b", (1,)))
    assert device_wait_ms(backlog, ClassView("sim-h100", 2)) is None  # no partitions known
    assert device_wait_ms(backlog, view) == 0.0  # both idle
    backlog.add_entry(_entry(0, 30.0))
    backlog.add_entry(_entry(1, 10.0))
    assert device_wait_ms(backlog, view) == 10.0  # the average device would wait 20
    assert device_wait_ms(backlog, view, per_workload_ms=2.0) == 12.0
    backlog.observe("sim-h100", 10.0, 20.0)  # the class runs twice as slow as predicted
    assert device_wait_ms(backlog, view) == 20.0
    backlog.set_others({"sim-h100": Held(ms=8.0, count=2)})  # another worker's 8 ms, 2 devices
    assert device_wait_ms(backlog, view, per_workload_ms=1.0) == (10.0 + 4.0) * 2.0 + 1.0 + 1.0


def test_earliest_finish_policies_wait_at_the_device_queue_heuristics_at_the_average() -> None:
    from models.decision import Candidate
    from models.ops import Variant

    known = Candidate("sim-h100", Variant("fp32"), live_instances=4, backlog_ms=40.0,
                      device_wait_ms=2.0)
    unknown = Candidate("sim-h100", Variant("fp32"), live_instances=4, backlog_ms=40.0)
    assert known.expected_wait_ms == unknown.expected_wait_ms == 10.0
    assert known.start_wait_ms == 2.0 and unknown.start_wait_ms == 10.0


def test_the_device_wait_counts_down_from_when_its_oldest_work_was_routed() -> None:
    from models.dispatch import device_wait_ms

    backlog = Backlog()
    view = _view(("a", (0,)))
    first = {**_entry(0, 10.0), "decided_at_ms": 1_000}
    second = {**_entry(0, 10.0), "decided_at_ms": 1_004}
    backlog.add_entry(first)
    backlog.add_entry(second)
    assert device_wait_ms(backlog, view, per_workload_ms=8.0) == 36.0  # no clock: in full
    # Working on them for 6 ms: the first (18 ms with its overhead) is in progress and counts
    # in full; whole workloads predicted done leave the wait (their completions are still a
    # Kafka hop away), all of them once the time for all has passed.
    assert device_wait_ms(backlog, view, per_workload_ms=8.0, now_ms=1_006) == 36.0
    assert device_wait_ms(backlog, view, per_workload_ms=8.0, now_ms=1_020) == 18.0
    assert device_wait_ms(backlog, view, per_workload_ms=8.0, now_ms=1_100) == 0.0
    backlog.remove_entry(first, now_ms=1_012)  # seen finished at 1_012: second started then
    assert backlog.lane("sim-h100", 0).working_since_ms() == 1_012
    assert device_wait_ms(backlog, view, per_workload_ms=8.0, now_ms=1_015) == 18.0
    assert device_wait_ms(backlog, view, per_workload_ms=8.0, now_ms=1_030) == 0.0
    backlog.observe("sim-h100", 10.0, 20.0)  # its work takes twice what it was charged
    assert device_wait_ms(backlog, view, per_workload_ms=8.0, now_ms=1_030) == 28.0
    backlog.remove_entry(second)
    assert backlog.lane("sim-h100", 0).working_since_ms() is None


def test_the_remembered_least_loaded_device_follows_every_lane_change() -> None:
    """The scan is remembered per class (models/dispatch.py) until one of its lanes, or its
    devices' partitions, change: each change must be seen at once."""
    backlog = Backlog()
    view = _view(("a", (0,)), ("b", (1,)))
    assert route_partition(backlog, view) == 0
    first = _entry(0, 30.0)
    backlog.add_entry(first)
    assert route_partition(backlog, view) == 1
    backlog.add_entry(_entry(1, 50.0))
    assert route_partition(backlog, view) == 0
    backlog.remove_entry(first)
    assert route_partition(backlog, view) == 0
    # the same lanes, but b now owns partition 2 as well (idle): a new view is a new answer
    assert route_partition(backlog, _view(("a", (0,)), ("b", (1, 2)))) == 0
    backlog.add_entry(_entry(0, 60.0))
    assert route_partition(backlog, _view(("a", (0,)), ("b", (1, 2)))) == 2
    backlog.rebuild([])
    assert route_partition(backlog, view) == 0


def test_the_oldest_routing_time_survives_removals_in_any_order() -> None:
    backlog = Backlog()
    entries = [{**_entry(0, 1.0), "decided_at_ms": at} for at in (300, 100, 200, 100)]
    for entry in entries:
        backlog.add_entry(entry)
    lane = backlog.lane("sim-h100", 0)
    assert lane.working_since_ms() == 100
    backlog.remove_entry(entries[1])
    assert lane.working_since_ms() == 100  # another workload was routed at 100 too
    backlog.remove_entry(entries[3])
    assert lane.working_since_ms() == 200
    backlog.remove_entry(entries[0])
    assert lane.working_since_ms() == 200
    backlog.add_entry(entries[1])  # routed at 100 again
    assert lane.working_since_ms() == 100
    backlog.remove_entry(entries[1])
    backlog.remove_entry(entries[2])
    assert lane.working_since_ms() is None


def test_live_classes_carry_the_host_cores_of_their_pinned_devices() -> None:
    now = 1_000_000

    def device(name: str, cls: str, **extra: object) -> dict:
        return {"device_id": name, "device_class": cls, "last_seen_ms": now, **extra}

    views = live_classes([
        device("t", "torch-cpu-x86", host="box", cpus=[1]),
        device("j", "jax-cpu-x86", host="box", cpus=[1, 2]),
        device("n", "numpy-cpu-x86", cpus=[1]),  # an older executor: no host, so unknown
        device("u", "numpy-cpu-x86", host="box", cpus=None),  # unpinned
        device("x", "jax-cpu-x86", host="other", cpus=[True, "2", 3]),  # only ints count
        # Pinned, but their executions do not run on the host's CPU: no cores to share.
        device("s", "sim-cpu-core", host="box", cpus=[1], device="cpu-core", simulated=True),
        device("g", "torch-cuda-h100", host="box", cpus=[1], device="cuda"),
    ], now, 5.0)
    assert views["sim-cpu-core"].cores == frozenset()
    assert views["torch-cuda-h100"].cores == frozenset()
    assert views["torch-cpu-x86"].cores == {("box", 1)}
    assert views["jax-cpu-x86"].cores == {("box", 1), ("box", 2), ("other", 3)}
    assert views["numpy-cpu-x86"].cores == frozenset()


def shared_core_classes(numpy_core: int) -> dict[str, ClassView]:
    """torch on core 1 of host "box", JAX on cores 1 and 2, NumPy on ``numpy_core``, and an
    unpinned simulated class that shares nothing."""
    def box(*cpus: int) -> frozenset[tuple[str, int]]:
        return frozenset(("box", c) for c in cpus)

    return {
        "torch-cpu-x86": ClassView("torch-cpu-x86", 1, cores=box(1)),
        "jax-cpu-x86": ClassView("jax-cpu-x86", 1, cores=box(1, 2)),
        "numpy-cpu-x86": ClassView("numpy-cpu-x86", 1, cores=box(numpy_core)),
        "sim-h100": ClassView("sim-h100", 2),
    }


def test_classes_on_a_shared_core_take_turns_while_their_own_queue_drains() -> None:
    classes = shared_core_classes(numpy_core=3)
    backlog = {"torch-cpu-x86": 40.0, "jax-cpu-x86": 100.0, "numpy-cpu-x86": 7.0,
               "sim-h100": 500.0}
    waits, _ = colocated(classes, core_sharing(classes),
                         {"torch-cpu-x86": 40.0, "jax-cpu-x86": None,
                          "numpy-cpu-x86": 7.0, "sim-h100": 250.0}, backlog)
    # torch shares its one core with half of jax's two: while torch's 40 ms drain, jax's
    # queue takes half of its turns there.
    assert waits["torch-cpu-x86"] == 40.0 + 40.0 * 1 / 2
    # jax (its wait unknown: its backlog over instances) shares one core with all of torch's,
    # whose 40 ms are done within jax's 100.
    assert waits["jax-cpu-x86"] == 100.0 + 40.0
    assert waits["numpy-cpu-x86"] == 7.0 and waits["sim-h100"] == 250.0
    # An idle class starts at once beside a busy neighbour: its own executor's queue is empty.
    idle, _ = colocated(classes, core_sharing(classes),
                        {"torch-cpu-x86": 0.0, "jax-cpu-x86": 100.0}, backlog)
    assert idle["torch-cpu-x86"] == 0.0 and idle["jax-cpu-x86"] == 100.0
    # ... on a busy core: half of jax's 100 queued ms are on torch's core; torch has nothing
    # queued (its wait is 0), so jax's cores hold no one else's work; numpy and sim share none.
    _, busy = colocated(classes, core_sharing(classes),
                        {"torch-cpu-x86": 0.0, "jax-cpu-x86": 100.0}, backlog)
    assert busy == {"torch-cpu-x86": 50.0}
    # A neighbour's work counts as its own wait counts it: torch's overhead already counted
    # down (its wait 25 of its 40 ms backlog) is not charged to jax either.
    waits, _ = colocated(classes, core_sharing(classes),
                         {"torch-cpu-x86": 25.0, "jax-cpu-x86": None}, backlog)
    assert waits["jax-cpu-x86"] == 100.0 + 25.0


def test_a_class_on_a_shared_core_runs_beside_what_its_neighbours_have_left() -> None:
    classes = shared_core_classes(numpy_core=1)
    waits = {"torch-cpu-x86": 10.0, "jax-cpu-x86": 100.0, "numpy-cpu-x86": 0.0,
             "sim-h100": 500.0}
    backlog = {"torch-cpu-x86": 10.0, "jax-cpu-x86": 100.0, "numpy-cpu-x86": 0.0,
               "sim-h100": 1000.0}
    counts = {"torch-cpu-x86": 2, "jax-cpu-x86": 4, "numpy-cpu-x86": 0, "sim-h100": 9}
    left = core_left(classes, core_sharing(classes), waits, backlog, counts)
    # Once torch's own 10 ms drained, jax has 90 of its 100 ms left (in its 4 workloads'
    # proportion: 3.6), half of it on torch's core; numpy holds nothing.
    assert left["torch-cpu-x86"] == ((45.0, 3.6),)
    # NumPy's own queue is empty: torch's and jax's work is all still there.
    assert sorted(left["numpy-cpu-x86"]) == [(10.0, 2.0), (50.0, 4.0)]
    # jax outlasts both neighbours' queues: nothing left beside it; sim shares no core.
    assert "jax-cpu-x86" not in left and "sim-h100" not in left


def test_classes_sharing_a_queue_wait_for_all_of_it_and_take_no_turns() -> None:
    """torch, JAX and NumPy served by one process on core 1 (one compute thread: their work
    runs one at a time in arrival order); a second torch executor with a queue of its own on
    the same core still takes turns with them."""
    now = 1_000_000

    def device(name: str, cls: str, group: str | None, **extra: object) -> dict:
        return {"device_id": name, "device_class": cls, "last_seen_ms": now, "host": "box",
                "cpus": [1], "queue_group": group, **extra}

    views = live_classes([
        device("t", "torch-cpu-x86", "7-torch+jax+numpy"),
        device("j", "jax-cpu-x86", "7-torch+jax+numpy"),
        device("n", "numpy-cpu-x86", "7-torch+jax+numpy"),
        device("o", "numpy-cpu-x86", None),  # NumPy's second device: a process of its own
        device("e", "tf-cpu-x86", None),
    ], now, 5.0)
    assert views["jax-cpu-x86"].queues == {("box", "7-torch+jax+numpy")}
    assert views["tf-cpu-x86"].queues == frozenset()
    queued_with = queue_sharing(views)
    # NumPy: one of its two live devices is in the group.
    assert queued_with["torch-cpu-x86"] == {"jax-cpu-x86": 1.0, "numpy-cpu-x86": 0.5}
    assert "tf-cpu-x86" not in queued_with
    sharing = core_sharing(views)
    # One queue does not take turns on its core; the class with an executor of its own does.
    assert set(sharing["torch-cpu-x86"]) == {"tf-cpu-x86"}
    assert set(sharing["tf-cpu-x86"]) == {"torch-cpu-x86", "jax-cpu-x86", "numpy-cpu-x86"}

    waits = {"torch-cpu-x86": 0.0, "jax-cpu-x86": 30.0, "numpy-cpu-x86": 10.0,
             "tf-cpu-x86": 0.0}
    backlog = {"torch-cpu-x86": 0.0, "jax-cpu-x86": 30.0, "numpy-cpu-x86": 20.0,
               "tf-cpu-x86": 0.0}
    only_queue = {name: views[name] for name in ("torch-cpu-x86", "jax-cpu-x86")}
    stretched, busy = colocated(only_queue, core_sharing(only_queue), waits, backlog,
                                queue_sharing(only_queue))
    # An idle torch waits for all of JAX's 30 queued ms (turns would have charged none).
    assert stretched["torch-cpu-x86"] == 30.0 and busy["torch-cpu-x86"] == 30.0
    assert stretched["jax-cpu-x86"] == 30.0  # torch holds nothing
    # With NumPy's half-shared queue (one of its two devices in the group): half its work.
    waits_all, _ = colocated(views, sharing, waits, backlog, queued_with)
    assert queued_with["jax-cpu-x86"]["numpy-cpu-x86"] == 0.5
    assert waits_all["jax-cpu-x86"] == 30.0 + 10.0 * 2 * 0.5


def test_shared_core_ms_counts_the_turns_taken_and_given() -> None:
    # A neighbour with 30 ms left in 3 workloads (alone, they finish at 10, 20 and 30 ms).
    left = ((30.0, 3.0),)
    # 10 ms of work beside it takes 10 ms longer; the neighbour's workloads give up 10 ms of
    # turns each (each finishes 10 ms later).
    assert shared_core_ms(left, 10.0) == (10.0, 30.0)
    assert shared_core_ms(left, 5.0) == (5.0, 15.0)
    # Longer than the neighbour's work: it takes all 30 ms of turns; its workloads finish
    # 10, 20 and 30 ms later.
    assert shared_core_ms(left, 100.0) == (30.0, 60.0)
    # Two neighbours add up; nothing beside it costs nothing.
    assert shared_core_ms(((30.0, 3.0), (4.0, 1.0)), 10.0) == (14.0, 34.0)
    assert shared_core_ms((), 10.0) == (0.0, 0.0)


def _reference_scan(backlog: Backlog, view: ClassView,
                    per_workload_ms: float) -> tuple[float, int, int, float | None] | None:
    """The least-loaded device and partition, spelled out (each lane read through
    ``Backlog.lane``): what `_scan` computes in one pass."""
    best = None
    for _, partitions in view.route_partitions:
        if not partitions:
            continue
        held = {p: backlog.lane(view.device_class, p) for p in partitions}
        partition = min(partitions, key=lambda p: (held[p].ms + held[p].count * per_workload_ms,
                                                   p))
        oldest = [t for h in held.values() if (t := h.working_since_ms()) is not None]
        found = (sum(h.ms for h in held.values()), sum(h.count for h in held.values()),
                 partition, min(oldest) if oldest else None)
        load = found[0] + found[1] * per_workload_ms
        if best is None or load < best[0]:
            best = (load, found)
    return None if best is None else best[1]


def test_the_one_pass_scan_agrees_with_the_spelled_out_one() -> None:
    """Random lanes (entries routed and released, ties, lanes never routed to, devices
    without partitions): the same device, partition, totals and oldest routing time."""
    import random

    from models.dispatch import _scan

    rng = random.Random(7)
    for _ in range(400):
        backlog, count = Backlog(), rng.randint(1, 12)
        parts = list(range(count))
        rng.shuffle(parts)
        devices = rng.randint(1, 4)
        view = ClassView(device_class="c", live_instances=devices, capabilities=frozenset(),
                         route_partitions=tuple((f"d{d}", tuple(sorted(parts[d::devices])))
                                                for d in range(devices)))
        entries = [{"device_class": "c", "charged_ms": rng.choice([0.0, 1.0, 2.5, rng.random()]),
                    "route_partition": rng.randrange(count + 1),
                    "decided_at_ms": rng.choice([100, 200, rng.randint(0, 1000)])}
                   for _ in range(rng.randint(0, 30))]
        for entry in entries:
            backlog.add_entry(entry)
        for entry in entries[:rng.randint(0, len(entries))]:
            backlog.remove_entry(entry, rng.choice([None, 150.0, 500.0]))
        for overhead in (0.0, 0.5, 8.0):
            assert _scan(backlog, view, overhead) == _reference_scan(backlog, view, overhead)
