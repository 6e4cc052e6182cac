"""The executor's compute thread runs a fetched plan's groups back to back: the device does not
wait for the event loop to publish one result before it starts the next route, and once the
executor is stopping it starts no other group (the op in hand still finishes and is yielded).
The runtime and the publishing are replaced by fakes: this is the ordering logic only."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from app.executor import Executor
from app.executor_plan import Plan
from app.settings import Settings
from runtimes.sim_rt import SimRuntime

WAIT_S = 10.0  # a bound for a deadlock, never reached when the logic is right


async def published_nothing(producer: Any, p: Plan, group: list[int], results: Any) -> list[Any]:
    return []


def executor(routes: int, execute: Any = None, publish: Any = published_nothing) -> Executor:
    """An executor whose plan of a fetched batch is ``routes`` routes, one group each, run by
    ``execute`` (in the compute thread) and published by ``publish`` (fakes)."""
    ex = Executor(Settings(), SimRuntime("h100"), "dev-0")
    plan = Plan([None] * routes, [{"id": f"w{i}"} for i in range(routes)], {},
                [[i] for i in range(routes)])
    ex._plan = lambda batch: plan  # type: ignore[method-assign]
    if execute is not None:
        ex._execute = execute  # type: ignore[method-assign]
    ex._publish_group = publish  # type: ignore[method-assign]
    return ex


def batch(n: int) -> list[Any]:
    return [(None, None)] * n


def test_the_next_route_runs_while_the_last_result_is_published() -> None:
    third_started = threading.Event()
    ran: list[int] = []

    def execute(p: Plan, group: list[int]) -> Any:
        ran.append(group[0])
        if group[0] == 2:
            third_started.set()
        return []

    async def publish(producer: Any, p: Plan, group: list[int], results: Any) -> list[Any]:
        if group[0] == 0:
            # Publishing the first result waits until the thread has started the third route:
            # a thread that waited for each publish would never get there.
            assert await asyncio.to_thread(third_started.wait, WAIT_S)
        return []

    async def main() -> list[list[int]]:
        return [group async for group, _ in ex._run_plan(None, batch(4))]  # type: ignore[arg-type]

    ex = executor(4, execute, publish)
    try:
        assert asyncio.run(main()) == [[0], [1], [2], [3]]
        assert ran == [0, 1, 2, 3]
    finally:
        ex.compute.shutdown(wait=False)


def test_a_stopping_executor_finishes_the_op_in_hand_and_starts_no_other() -> None:
    release = threading.Event()
    ran: list[int] = []

    def execute(p: Plan, group: list[int]) -> Any:
        ran.append(group[0])
        assert release.wait(WAIT_S)  # the op in hand while the executor is told to stop
        return []

    async def main() -> list[list[int]]:
        async def stop_then_release() -> None:
            while not ran:
                await asyncio.sleep(0.001)
            ex.stopping.set()
            release.set()

        stopper = asyncio.create_task(stop_then_release())
        groups = [group async for group, _ in ex._run_plan(None, batch(3))]  # type: ignore[arg-type]
        await stopper
        return groups

    ex = executor(3, execute)
    try:
        assert asyncio.run(main()) == [[0]]
        assert ran == [0]
    finally:
        ex.compute.shutdown(wait=False)


def test_a_failed_publish_runs_nothing_more_of_the_plan() -> None:
    ran: list[int] = []
    first_published = threading.Event()

    def execute(p: Plan, group: list[int]) -> Any:
        if group[0] > 0:
            assert first_published.wait(WAIT_S)
        ran.append(group[0])
        return []

    async def publish(producer: Any, p: Plan, group: list[int], results: Any) -> list[Any]:
        raise RuntimeError("the producer is gone")

    async def main() -> None:
        try:
            async for _ in ex._run_plan(None, batch(5)):  # type: ignore[arg-type]
                pass
        finally:
            first_published.set()

    ex = executor(5, execute, publish)
    try:
        with pytest.raises(RuntimeError, match="producer is gone"):
            asyncio.run(main())
        ex.compute.shutdown(wait=True)
        assert ran in ([0], [0, 1])  # at most the op already started when publishing failed
    finally:
        ex.compute.shutdown(wait=False)


class Consumer:
    """Records the offsets committed, in order."""

    def __init__(self) -> None:
        self.log: list[Any] = []

    async def commit(self, offsets: dict[Any, int]) -> None:
        self.log.append(dict(offsets))


def test_a_batch_is_committed_in_the_background_after_its_acks_and_in_order() -> None:
    from aiokafka import TopicPartition

    tp = TopicPartition("routes", 0)
    ex = executor(1)
    consumer = Consumer()

    async def main() -> None:
        acks = [asyncio.Event(), asyncio.Event()]

        async def send(i: int) -> None:
            await acks[i].wait()
            consumer.log.append(f"ack {i}")

        first = asyncio.create_task(send(0))
        await ex._commit_behind(None, consumer, [first], {tp: 5})  # type: ignore[arg-type]
        # Returned at once: the next batch runs while the first one's records travel.
        assert consumer.log == []
        second = asyncio.create_task(send(1))
        behind = asyncio.create_task(
            ex._commit_behind(None, consumer, [second], {tp: 9}))  # type: ignore[arg-type]
        acks[1].set()  # the later batch is acknowledged first ...
        await asyncio.sleep(0.01)
        assert {tp: 9} not in consumer.log  # ... and still waits for the earlier commit
        acks[0].set()
        await behind
        await ex.commit_pending()

    try:
        asyncio.run(main())
        assert consumer.log == ["ack 1", "ack 0", {tp: 5}, {tp: 9}]
    finally:
        ex.compute.shutdown(wait=False)


def test_a_failed_background_commit_is_raised_by_the_next() -> None:
    from aiokafka import TopicPartition

    ex = executor(1)

    async def fail() -> None:
        raise RuntimeError("no ack")

    async def main() -> None:
        await ex._commit_behind(None, Consumer(), [asyncio.create_task(fail())],  # type: ignore[arg-type]
                                {TopicPartition("routes", 0): 1})
        await ex.commit_pending()

    try:
        with pytest.raises(RuntimeError, match="no ack"):
            asyncio.run(main())
    finally:
        ex.compute.shutdown(wait=False)
