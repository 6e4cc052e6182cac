"""The executor's compute thread runs a fetched plan's groups back to back: the device does not
wait for the event loop to publish one result before it starts the next route, and once the
executor is stopping it starts no other group (the op in hand still finishes and is yielded).
The runtime and the publishing are replaced by fakes: this is the ordering logic only."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from app.executor import Executor
from app.executor_plan import Plan
from app.settings import Settings
from runtimes.sim_rt import SimRuntime

WAIT_S = 10.0  # a bound for a deadlock, never reached when the logic is right


def executor() -> Executor:
    return Executor(Settings(), SimRuntime("h100"), "dev-0")


def plan(n: int) -> Plan:
    return Plan([None] * n, [{"id": f"w{i}"} for i in range(n)], {}, [[i] for i in range(n)])


def test_the_next_route_runs_while_the_last_result_is_published() -> None:
    ex = executor()
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
        return [group async for group, _ in ex._run_plan(None, plan(4))]  # type: ignore[arg-type]

    ex._execute = execute  # type: ignore[method-assign]
    ex._publish_group = publish  # type: ignore[method-assign]
    try:
        assert asyncio.run(main()) == [[0], [1], [2], [3]]
        assert ran == [0, 1, 2, 3]
    finally:
        ex.compute.shutdown(wait=False)


def test_a_stopping_executor_finishes_the_op_in_hand_and_starts_no_other() -> None:
    ex = executor()
    release = threading.Event()
    ran: list[int] = []

    def execute(p: Plan, group: list[int]) -> Any:
        ran.append(group[0])
        assert release.wait(WAIT_S)  # the op in hand while the executor is told to stop
        return []

    async def publish(producer: Any, p: Plan, group: list[int], results: Any) -> list[Any]:
        return []

    async def main() -> list[list[int]]:
        async def stop_then_release() -> None:
            while not ran:
                await asyncio.sleep(0.001)
            ex.stopping.set()
            release.set()

        stopper = asyncio.create_task(stop_then_release())
        groups = [group async for group, _ in ex._run_plan(None, plan(3))]  # type: ignore[arg-type]
        await stopper
        return groups

    ex._execute = execute  # type: ignore[method-assign]
    ex._publish_group = publish  # type: ignore[method-assign]
    try:
        assert asyncio.run(main()) == [[0]]
        assert ran == [0]
    finally:
        ex.compute.shutdown(wait=False)


def test_a_failed_publish_runs_nothing_more_of_the_plan() -> None:
    ex = executor()
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
            async for _ in ex._run_plan(None, plan(5)):  # type: ignore[arg-type]
                pass
        finally:
            first_published.set()

    ex._execute = execute  # type: ignore[method-assign]
    ex._publish_group = publish  # type: ignore[method-assign]
    try:
        try:
            asyncio.run(main())
        except RuntimeError as exc:
            assert "producer is gone" in str(exc)
        else:
            raise AssertionError("the publishing error was swallowed")
        ex.compute.shutdown(wait=True)
        assert ran in ([0], [0, 1])  # at most the op already started when publishing failed
    finally:
        ex.compute.shutdown(wait=False)
