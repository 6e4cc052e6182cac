"""Run a coroutine's first step at once, and schedule it only if it has to wait.

``asyncio.ensure_future(coro)`` always costs a turn of the event loop before the coroutine
starts, and another before whoever awaits the task sees it done, even when the coroutine
never suspends. Python 3.12's eager tasks remove that; on 3.11 ``start`` does the same job by
hand: the coroutine is stepped here, and an awaitable that finishes it is handed back only if
that step suspended on a future.

Faust's fetcher delivers every message through ``Service.wait_first``, one task per message
(``app/faust_patches.py::install_eager_delivery`` uses this to deliver straight away).
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any


class Resumed:
    """The rest of a coroutine that ``start`` stepped once and that then suspended on
    ``waiting_on`` (a future, or None for a bare yield to the loop). Awaiting it (or wrapping it
    in a task) finishes the coroutine: values and exceptions the loop sends go to it, and its
    return value or exception is this awaitable's."""

    __slots__ = ("_coro", "_waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self._coro = coro
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waiting_on = self._coro, self._waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - cancellation included: the coroutine's to handle
                try:
                    waiting_on = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waiting_on = coro.send(sent)
                except StopIteration as stop:
                    return stop.value

    def close(self) -> None:
        """Close the coroutine (it is never to be finished)."""
        self._coro.close()


def start(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Step ``coro`` once. ``(True, result)`` when it finished in that step (it never
    suspended; an exception it raised propagates), else ``(False, Resumed)`` to await."""
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, Resumed(coro, waiting_on)
