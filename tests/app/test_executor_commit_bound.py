"""A commit that never finishes must not hold the executor (app/executor.py:
``commit_or_give_up``): aiokafka's commit waits for the group coordinator without a bound.
Fake consumers: unit tests of the bound only (the commit path against a broker is covered by
tests/app/test_executor_commit.py and the reliability suite)."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError

from app.executor import commit_or_give_up

TP = TopicPartition("routes", 0)


class Consumer:
    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.committed: dict[TopicPartition, int] = {}

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self.behaviour == "hang":
            await asyncio.Event().wait()  # a coordinator that never comes back
        if self.behaviour == "fail":
            raise CommitFailedError("partition revoked")
        self.committed.update(offsets)


def run(consumer: Consumer, timeout_s: float = 0.2) -> bool:
    return asyncio.run(asyncio.wait_for(commit_or_give_up(consumer, TP, 7, timeout_s), 10))


def test_a_commit_that_never_finishes_is_given_up_after_the_bound(caplog) -> None:
    assert run(Consumer("hang")) is False
    assert "did not finish within" in caplog.text


def test_a_failed_commit_is_reported_and_a_good_one_commits() -> None:
    assert run(Consumer("fail")) is False
    ok = Consumer("ok")
    assert run(ok) is True and ok.committed == {TP: 7}
