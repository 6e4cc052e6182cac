"""decide's duplicate check looks the workload up in its own partition of ``completed``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest


class PartitionedTable:
    """A table that, as Faust's RocksDB store does, looks a key up only in the partition of the
    current event (here: a dict per partition)."""

    def __init__(self, by_partition: dict[int, set[bytes]]) -> None:
        self.by_partition = by_partition

    def __contains__(self, key: bytes) -> bool:
        from faust.streams import current_event

        event = current_event()
        return event is not None and key in self.by_partition.get(event.message.partition, set())


class Event:
    """A record's event as the stages read it (``.message``); weak-referenceable, as Faust's."""

    def __init__(self, partition: int, offset: int) -> None:
        self.message = SimpleNamespace(topic="w", partition=partition, offset=offset)


def event(partition: int, offset: int) -> Any:
    return Event(partition, offset)


def test_a_completed_workload_is_found_whatever_event_is_current(monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """In a batch, Faust's current event is the last record the stream delivered: a workload
    of partition 3 re-read after a rebalance was looked up in partition 0's store, taken for
    new and routed again (test_rebalance, CI 2026-12-07). It is looked up in its own."""
    from agents import decide
    from app.streaming import event_context

    monkeypatch.setattr(decide, "completed", PartitionedTable({3: {b"rb-000014"}}))
    last_of_batch = event(0, 40)
    with event_context(last_of_batch):
        # What the check did before: the current event's partition, not the workload's.
        assert b"rb-000014" not in decide.completed
        assert decide.is_completed("rb-000014", event(3, 6))
        assert not decide.is_completed("rb-000015", event(3, 7))
