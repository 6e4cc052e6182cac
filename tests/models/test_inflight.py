"""The in-flight book: one stored batch per decide batch and partition, deleted when empty."""

from __future__ import annotations

from typing import Any

import pytest

from models.inflight import InflightBook, batch_key, key_partition, reroute_key


def entry(device_class: str = "cpu", attempt: int = 1, decided: int = 100,
          partition: int = 0, offset: int = 0) -> dict[str, Any]:
    return {"device_class": device_class, "variant": {}, "predicted_ms": 1.0,
            "charged_ms": 1.0, "decided_at_ms": decided, "attempt": attempt,
            "partition": partition, "offset": offset, "workload": {"id": "x"}}


def test_keys_name_their_partition() -> None:
    assert key_partition(batch_key(3, 120)) == 3
    assert key_partition(reroute_key(2, "job:7", 2)) == 2
    assert reroute_key(2, "a", 2) != reroute_key(2, "a", 3)
    with pytest.raises(ValueError):
        key_partition("job-7")


def test_a_batch_is_deleted_once_its_last_workload_finished() -> None:
    book = InflightBook()
    key = batch_key(0, 10)
    for wid in ("a", "b", "c"):
        assert book.add(key, 0, wid, entry()) == []
    assert set(book.value(key)) == {"a", "b", "c"}
    book.mark_written(key)
    assert book.close("a") == (entry(), [])
    assert book.close("b")[1] == []
    assert set(book.value(key)) == {"c"}
    assert book.close("c")[1] == [(key, 0)]
    assert len(book) == 0 and book.batches() == {}
    assert book.close("c") == (None, [])  # a second outcome of the same workload


def test_a_batch_that_finished_before_it_was_written_is_never_deleted() -> None:
    book = InflightBook()
    key = batch_key(1, 5)
    book.add(key, 1, "a", entry(partition=1))
    assert book.get("a") is not None  # an outcome that beat the batch's write finds its entry
    assert book.close("a")[1] == []
    assert book.value(key) == {}
    book.mark_written(key)  # nothing to write: marking it changes nothing
    assert book.batches() == {}


def test_a_workload_routed_again_leaves_its_old_batch() -> None:
    book = InflightBook()
    old, new = batch_key(0, 10), reroute_key(0, "a", 2)
    book.add(old, 0, "a", entry())
    book.add(old, 0, "b", entry())
    book.mark_written(old)
    assert book.add(new, 0, "a", entry("gpu", attempt=2)) == []
    assert book.get("a")["device_class"] == "gpu"
    assert book.batches() == {old: frozenset({"b"}), new: frozenset({"a"})}
    book.mark_written(new)
    assert book.close("b")[1] == [(old, 0)]
    assert book.close("a")[1] == [(new, 0)]


def test_rebuild_keeps_the_newest_entry_and_names_the_empty_batches() -> None:
    book = InflightBook()
    stored = [
        (batch_key(0, 10), {"a": entry(decided=100), "b": entry(decided=100)}),
        # "a" redelivered after a crash and routed again from a later batch
        (batch_key(0, 12), {"a": entry("gpu", decided=200), "c": entry(decided=200)}),
        (batch_key(1, 3), {"d": entry(partition=1)}),  # finished: its result is published
        ("job-9", entry(partition=1, offset=4)),  # written by a version before batches
        ("not-ours", {"e": entry()}),  # neither a batch key nor an entry: skipped
    ]
    garbage = book.rebuild(stored, finished=lambda wid: wid == "d")
    assert garbage == [(batch_key(1, 3), 1)]
    assert book.get("a")["device_class"] == "gpu"
    assert book.get("d") is None and book.get("e") is None
    assert book.batches() == {batch_key(0, 10): frozenset({"b"}),
                              batch_key(0, 12): frozenset({"a", "c"}),
                              "job-9": frozenset({"job-9"})}
    assert book.close("b")[1] == [(batch_key(0, 10), 0)]
    assert book.close("job-9")[1] == [("job-9", 1)]


def test_a_redelivered_batch_under_the_same_key_keeps_the_entries_not_yet_routed_again() -> None:
    book = InflightBook()
    key = batch_key(0, 10)
    book.rebuild([(key, {"a": entry(decided=1), "b": entry(decided=1)})], lambda wid: False)
    book.add(key, 0, "a", entry("gpu", decided=2))  # the redelivery routes "a" again first
    assert book.value(key)["a"]["device_class"] == "gpu"
    assert set(book.value(key)) == {"a", "b"}  # "b" keeps its entry until it comes again
    assert book.add(batch_key(0, 11), 0, "b", entry(decided=3)) == []
    assert set(book.value(key)) == {"a"}
