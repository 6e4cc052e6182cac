"""The in-memory backlog (models/backlog.py): running totals that match a rebuild."""

from __future__ import annotations

import pytest

from models.backlog import Backlog, Held, charge_of, merge_shares


def entry(device_class: str, charged: float) -> dict:
    return {"device_class": device_class, "predicted_ms": charged / 2, "charged_ms": charged}


def test_running_totals_equal_a_rebuild_from_the_remaining_entries() -> None:
    entries = {f"w{i}": entry("a" if i % 3 else "b", float(i)) for i in range(30)}
    running = Backlog()
    for e in entries.values():
        running.add_entry(e)
    for i in range(0, 30, 2):  # half of them finish
        running.remove_entry(entries.pop(f"w{i}"))
    rebuilt = Backlog()
    rebuilt.rebuild(list(entries.values()) + [None])
    for device_class, held in rebuilt.by_class().items():
        assert running.by_class()[device_class] == pytest.approx(held)
    assert set(running.by_class()) == set(rebuilt.by_class())
    assert rebuilt.by_class()["b"]["count"] == sum(1 for e in entries.values()
                                                   if e["device_class"] == "b")


def test_ms_adds_the_per_workload_overhead_and_never_goes_negative() -> None:
    backlog = Backlog()
    backlog.add_entry(entry("a", 4.0))
    backlog.add_entry(entry("a", 6.0))
    assert backlog.ms("a", per_workload_ms=1.5) == pytest.approx(13.0)
    assert backlog.ms("unknown", per_workload_ms=1.5) == 0.0
    backlog.remove_entry(entry("a", 50.0))
    backlog.remove_entry(entry("a", 50.0))
    backlog.remove_entry(entry("a", 50.0))
    assert backlog.by_class() == {"a": {"ms": 0.0, "count": 0, "pace": 1.0, "others_ms": 0.0,
                                        "others_count": 0}}
    assert backlog.busy_classes() == set()


def test_a_class_with_work_is_busy_and_old_entries_charge_their_prediction() -> None:
    backlog = Backlog()
    backlog.add_entry({"device_class": "c", "predicted_ms": 3.0})  # written before charged_ms
    assert backlog.busy_classes() == {"c"}
    assert charge_of({"predicted_ms": 3.0}) == 3.0
    assert backlog.ms("c") == 3.0


def test_pace_scales_the_expected_wait_of_a_class_slower_than_predicted() -> None:
    backlog = Backlog()
    backlog.add("slow", 100.0, 10)
    backlog.add("fast", 100.0, 10)
    assert backlog.ms("slow") == pytest.approx(100.0)  # no completion yet: the charges
    for _ in range(60):  # the slow class takes 3x what it was charged, the fast one 1x
        backlog.observe("slow", charged_ms=10.0, measured_ms=30.0)
        backlog.observe("fast", charged_ms=10.0, measured_ms=10.0)
    assert backlog.pace("slow") == pytest.approx(3.0)
    assert backlog.ms("slow", per_workload_ms=1.0) == pytest.approx(300.0 + 10.0)
    assert backlog.ms("fast") == pytest.approx(100.0)
    assert backlog.by_class()["slow"]["pace"] == pytest.approx(3.0)
    backlog.rebuild([])  # a rebalance: the charges are rebuilt, the class keeps its pace
    assert backlog.pace("slow") == pytest.approx(3.0)


def test_a_class_with_nothing_finished_takes_the_smallest_pace_of_the_others() -> None:
    backlog = Backlog()
    assert backlog.pace("new") == 1.0
    for _ in range(60):  # every observed class runs slower than charged: priors are optimistic
        backlog.observe("slow", charged_ms=10.0, measured_ms=70.0)
        backlog.observe("slower", charged_ms=10.0, measured_ms=80.0)
    assert backlog.pace("new") == pytest.approx(7.0)
    backlog.add("new", 100.0, 1)
    assert backlog.ms("new") == pytest.approx(700.0)
    for _ in range(60):  # one class on pace: no lift for a class never seen
        backlog.observe("right", charged_ms=10.0, measured_ms=10.0)
    assert backlog.pace("new") == pytest.approx(1.0)
    backlog.observe("new", charged_ms=10.0, measured_ms=20.0)  # its own from its first
    assert backlog.pace("new") == pytest.approx(2.0)


def test_pace_follows_recent_completions_within_bounds_and_ignores_bad_ones() -> None:
    backlog = Backlog()
    backlog.observe("a", 10.0, 1000.0)  # 100x: held at the upper bound
    assert backlog.pace("a") == pytest.approx(8.0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        backlog.observe("a", bad, 10.0)
        backlog.observe("a", 10.0, bad)
    assert backlog.pace("a") == pytest.approx(8.0)
    for _ in range(200):  # back on pace: the ratio returns to 1
        backlog.observe("a", 10.0, 10.0)
    assert backlog.pace("a") == pytest.approx(1.0, rel=1e-6)


def share(worker: str, at_ms: float, **classes: tuple[float, int]) -> dict:
    return {"worker": worker, "at_ms": at_ms,
            "classes": {c: {"ms": ms, "count": n} for c, (ms, n) in classes.items()}}


def test_merge_shares_sums_the_other_workers_fresh_shares_only() -> None:
    shares = [
        share("me", 1000.0, a=(500.0, 5)),  # this worker's own: never counted twice
        share("w2", 990.0, a=(100.0, 2), b=(40.0, 1)),
        share("w3", 800.0, a=(10.0, 1)),
        share("dead", 100.0, a=(9999.0, 99)),  # stale: its worker stopped refreshing it
        None, {"worker": "w4"}, share("w5", 1000.0, a=(float("nan"), 1)),  # malformed
        {"worker": "w6", "at_ms": 1000.0, "classes": {"a": {"ms": 1.0, "count": "x"}}},
    ]
    merged = merge_shares(shares, "me", now_ms=1000.0, stale_ms=500.0)
    assert merged == {"a": Held(110.0, 3), "b": Held(40.0, 1)}


def test_the_others_share_counts_in_the_wait_but_is_not_republished() -> None:
    backlog = Backlog()
    backlog.add("a", 100.0, 2)
    backlog.observe("a", 10.0, 20.0)  # the class runs at twice its predictions
    before = backlog.ms("a", per_workload_ms=1.0)
    backlog.set_others({"a": Held(50.0, 3), "c": Held(30.0, 1)})
    # Everyone's work queues on the same executors: the same pace and overhead apply to it.
    assert backlog.ms("a", per_workload_ms=1.0) == pytest.approx(before + 50.0 * 2 + 3 * 1.0)
    # A class only the others routed to, with nothing finished here: the observed pace (2x).
    assert backlog.ms("c") == pytest.approx(60.0)
    assert backlog.share() == {"a": {"ms": 100.0, "count": 2}}
    assert backlog.by_class()["a"]["others_count"] == 3
    # A class only the others hold work on is in the view too, with none of it here.
    assert backlog.by_class()["c"] == {"ms": 0.0, "count": 0, "pace": 2.0, "others_ms": 30.0,
                                       "others_count": 1}
    backlog.set_others({})
    assert backlog.ms("a", per_workload_ms=1.0) == pytest.approx(before)


def test_a_class_holds_work_by_count_not_by_the_ms_left_after_releases() -> None:
    backlog = Backlog()
    charges = [0.1, 0.2, 0.7]
    for charged in charges:
        backlog.add_entry(entry("a", charged))
    for charged in charges:
        backlog.remove_entry(entry("a", charged))
    assert not backlog.holds_work("a") and not backlog.holds_work("never-routed")
    backlog.set_others({"b": Held(ms=5.0, count=1)})  # another worker's work on b
    assert backlog.holds_work("b")
    backlog.add_entry(entry("a", 0.1))
    assert backlog.holds_work("a")
