"""The in-memory backlog (models/backlog.py): running totals that match a rebuild."""

from __future__ import annotations

import pytest

from models.backlog import Backlog, charge_of


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
    assert backlog.by_class() == {"a": {"ms": 0.0, "count": 0}}
    assert backlog.busy_classes() == set()


def test_a_class_with_work_is_busy_and_old_entries_charge_their_prediction() -> None:
    backlog = Backlog()
    backlog.add_entry({"device_class": "c", "predicted_ms": 3.0})  # written before charged_ms
    assert backlog.busy_classes() == {"c"}
    assert charge_of({"predicted_ms": 3.0}) == 3.0
    assert backlog.ms("c") == 3.0
