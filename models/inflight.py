"""Routed, unfinished workloads: an in-memory index over the ``inflight`` table's batches.

The table (app/tables.py) holds one value per *decide batch and workload partition*: its key
is ``"<partition>:<first offset>"`` (``"<partition>:r<attempt>:<id>"`` for a re-route) and its
value maps each workload id the batch routed to its ``InflightEntry``. It is written once when
the batch is routed and deleted once every workload of it has finished or been routed again:
two changelog records per batch, where an entry per workload cost two per workload (a third of
the worker's CPU in a burst: BENCHMARKS.md, worker capacity).

The book is what decide, complete, the re-route timer and the dashboard read: workload id →
its newest entry, and for each stored batch the ids it still holds open. It is derived state,
rebuilt from the table (``rebuild``) whenever the worker's partitions change.

A workload can be in two stored batches: one routed again (a redelivery after a crash, or a
re-route) keeps its old entry in the old batch until that batch is deleted. The newest entry
(highest attempt, then latest decision) is the one that counts, and only its batch holds the
workload open; a batch whose every workload finished or moved is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from models.backlog import InflightEntry


def batch_key(partition: int, first_offset: int) -> str:
    """The table key of a decide batch: its workload partition and first record's offset."""
    return f"{partition}:{first_offset}"


def reroute_key(partition: int, workload_id: str, attempt: int) -> str:
    """The table key of a single re-routed workload (an attempt is routed once)."""
    return f"{partition}:r{attempt}:{workload_id}"


def key_partition(key: str) -> int:
    """The workload partition a batch key belongs to."""
    head, sep, _ = key.partition(":")
    if not sep or not head.isdigit():
        raise ValueError(f"not an in-flight batch key: {key!r}")
    return int(head)


def _newer(entry: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    return ((int(entry.get("attempt", 1)), float(entry.get("decided_at_ms", 0)))
            > (int(than.get("attempt", 1)), float(than.get("decided_at_ms", 0))))


class InflightBook:
    """Workload id → (batch key, newest entry); each batch's partition and open ids.

    Entries are added as routes are sent (``add``) and their batch is written to the table
    once the decide batch is done (``value``, then ``mark_written``): an outcome that arrives
    before that write finds its entry all the same. A batch whose workloads all finished
    before it was written is never written.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[str, InflightEntry]] = {}
        self._open: dict[str, set[str]] = {}
        self._partition: dict[str, int] = {}
        self._written: set[str] = set()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, workload_id: str) -> InflightEntry | None:
        held = self._entries.get(workload_id)
        return held[1] if held else None

    def items(self) -> list[tuple[str, InflightEntry]]:
        """(workload id, entry) of every open workload (a copy: safe to close while
        iterating)."""
        return [(wid, held[1]) for wid, held in self._entries.items()]

    def entries(self) -> list[InflightEntry]:
        return [held[1] for held in self._entries.values()]

    def batches(self) -> dict[str, frozenset[str]]:
        """Every batch held, with the ids it holds open."""
        return {key: frozenset(ids) for key, ids in self._open.items()}

    def partition(self, key: str) -> int:
        return self._partition[key]

    def add(self, key: str, partition: int, workload_id: str,
            entry: InflightEntry) -> list[tuple[str, int]]:
        """A route was sent for ``workload_id``; its entry belongs to batch ``key``. Returns
        the written batches (key, partition) it left empty (its older entry's batch): they
        are to be deleted from the table."""
        held = self._entries.get(workload_id)
        emptied = self._release(held[0], workload_id) if held and held[0] != key else []
        self._entries[workload_id] = (key, entry)
        self._open.setdefault(key, set()).add(workload_id)
        self._partition[key] = partition
        return emptied

    def value(self, key: str) -> dict[str, InflightEntry]:
        """What batch ``key`` stores: the entries it holds open (empty when none is)."""
        return {wid: self._entries[wid][1] for wid in self._open.get(key, ())}

    def mark_written(self, key: str) -> None:
        if key in self._open:
            self._written.add(key)

    def close(self, workload_id: str) -> tuple[InflightEntry | None, list[tuple[str, int]]]:
        """A workload finished: its entry (None when not held) and the written batches that
        now hold nothing open (to delete from the table)."""
        held = self._entries.pop(workload_id, None)
        if held is None:
            return None, []
        return held[1], self._release(held[0], workload_id)

    def _release(self, key: str, workload_id: str) -> list[tuple[str, int]]:
        ids = self._open.get(key)
        if ids is None:
            return []
        ids.discard(workload_id)
        if ids:
            return []
        del self._open[key]
        partition = self._partition.pop(key)
        if key in self._written:
            self._written.discard(key)
            return [(key, partition)]
        return []

    def rebuild(self, stored: Iterable[tuple[str, Mapping[str, Any] | None]],
                finished: Callable[[str], bool]) -> list[tuple[str, int]]:
        """Start again from the table's batches; ``finished(id)`` says a workload already has
        its result. Returns the stored batches (key, partition) that hold nothing open, to
        delete. A value stored by an older version (key = workload id, value = its entry) is
        read as a batch of one."""
        self._entries, self._open, self._partition, self._written = {}, {}, {}, set()
        garbage: list[tuple[str, int]] = []
        for key, value in stored:
            batch, partition = _as_batch(key, value)
            if partition is None:
                continue  # neither a batch key nor an entry with its partition: not ours
            self._partition[key] = partition
            self._written.add(key)
            self._open[key] = set()
            for workload_id, entry in batch.items():
                if not entry or finished(workload_id):
                    continue
                held = self._entries.get(workload_id)
                if held is None or _newer(entry, held[1]):
                    self._entries[workload_id] = (key, entry)
        for workload_id, (key, _) in self._entries.items():
            self._open[key].add(workload_id)
        for key in list(self._open):
            if not self._open[key]:
                del self._open[key]
                self._written.discard(key)
                garbage.append((key, self._partition.pop(key)))
        return garbage


def _as_batch(key: str, value: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], int | None]:
    """A stored value as a batch, and its workload partition (None: not one of ours)."""
    if value and "device_class" in value and "workload" in value:
        # One entry, keyed by its workload id, as versions before batches stored it.
        partition = value.get("partition")
        return {key: value}, int(partition) if partition is not None else None
    try:
        return value or {}, key_partition(key)
    except ValueError:
        return {}, None
