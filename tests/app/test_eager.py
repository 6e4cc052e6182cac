"""app/eager.py: a coroutine's first step at once, the rest only if it has to wait."""

from __future__ import annotations

import asyncio

import pytest

from app.eager import Resumed, start


async def _turns_while(awaitable_factory: object) -> int:
    """Event-loop turns that pass while ``awaitable_factory()`` is awaited."""
    turns = 0
    stop = False

    def tick() -> None:
        nonlocal turns
        if not stop:
            turns += 1
            asyncio.get_running_loop().call_soon(tick)

    asyncio.get_running_loop().call_soon(tick)
    await asyncio.sleep(0)  # the ticker runs
    before = turns
    await awaitable_factory()  # type: ignore[operator]
    stop = True
    return turns - before


async def _plain(value: int) -> int:
    return value * 2


async def test_a_coroutine_that_never_waits_finishes_in_the_first_step() -> None:
    finished, value = start(_plain(21))
    assert finished and value == 42


async def test_a_first_step_takes_no_turn_of_the_loop_where_a_task_takes_two() -> None:
    async def eager() -> None:
        assert start(_plain(1)) == (True, 2)

    async def task() -> None:
        assert await asyncio.ensure_future(_plain(1)) == 2

    assert await _turns_while(eager) == 0
    assert await _turns_while(task) >= 1


async def test_an_exception_of_the_first_step_propagates() -> None:
    async def bad() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        start(bad())


async def test_a_coroutine_that_waits_is_finished_by_awaiting_the_rest() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def waits() -> int:
        steps.append("first")
        got = await gate
        steps.append("after")
        await asyncio.sleep(0)  # a bare yield to the loop, then more work
        return got + 1

    finished, rest = start(waits())
    assert not finished and isinstance(rest, Resumed) and steps == ["first"]
    task = asyncio.ensure_future(rest)
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result(9)
    assert await task == 10
    assert steps == ["first", "after"]


async def test_an_exception_set_on_the_awaited_future_reaches_the_coroutine() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def waits() -> int:
        try:
            return await gate
        except KeyError:
            seen.append("caught")
            raise

    _, rest = start(waits())
    task = asyncio.ensure_future(rest)
    gate.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        await task
    assert seen == ["caught"]


def _started_on_a_gate() -> tuple[asyncio.Future[int], list[bool], Resumed]:
    """A coroutine stepped once (``start``) that waits on a future (the gate) and records
    its cleanup; the gate, the cleanup record and the rest of the coroutine."""
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    cleaned: list[bool] = []

    async def waits() -> int:
        try:
            return await gate
        finally:
            cleaned.append(True)

    finished, rest = start(waits())
    assert not finished and isinstance(rest, Resumed)
    return gate, cleaned, rest


async def test_cancelling_the_rest_cancels_the_coroutine_and_runs_its_cleanup() -> None:
    gate, cleaned, rest = _started_on_a_gate()
    task = asyncio.ensure_future(rest)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True] and gate.cancelled()


async def test_closing_the_rest_closes_the_coroutine() -> None:
    _, cleaned, rest = _started_on_a_gate()
    rest.close()
    assert cleaned == [True]
