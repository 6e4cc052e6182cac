"""What a batching executor may commit: never past a fetched route it has not run."""

from __future__ import annotations

from types import SimpleNamespace

from aiokafka import TopicPartition

from app.executor_plan import committable

P0, P1 = TopicPartition("routes", 0), TopicPartition("routes", 1)
BATCH = [(P0, SimpleNamespace(offset=10)), (P1, SimpleNamespace(offset=3)),
         (P0, SimpleNamespace(offset=11)), (P0, SimpleNamespace(offset=12)),
         (P1, SimpleNamespace(offset=4))]


def test_all_run_commits_past_the_last_of_each_partition() -> None:
    assert committable(BATCH, set(range(5))) == {P0: 13, P1: 5}


def test_a_route_not_run_holds_its_partition_back() -> None:
    # Batched out of order: 10 and 12 ran, 11 did not: commit up to 11 only.
    assert committable(BATCH, {0, 3}) == {P0: 11}
    assert committable(BATCH, {2, 3, 4}) == {P0: 10, P1: 3}
    assert committable(BATCH, {1}) == {P1: 4}
    assert committable(BATCH, set()) == {}
