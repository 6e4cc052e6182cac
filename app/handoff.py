"""Results handed from a worker thread to the event loop, one wake-up per burst.

``loop.call_soon_threadsafe`` writes to the loop's self-pipe on every call: one system call
per item. An executor's compute thread hands over every op it ran that way, and with
simulated ops of tens of microseconds those writes were over a third of the thread's time
(py-spy, the sustained pipeline benchmark on a 2-core VM). ``Handoff`` wakes the loop only
when it is not already due to look: while the loop is busy publishing one result, the ops the
thread finishes meanwhile queue up behind a single wake-up.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    """A FIFO of items put from any thread and taken, in order, on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[T] = collections.deque()
        self._lock = threading.Lock()
        self._woken = False  # a wake-up is pending, or the loop has not yet found it empty
        self._ready = asyncio.Event()
        self.wakeups = 0  # how many times the loop was woken (a test reads it)

    def put(self, item: T) -> None:
        """Queue ``item`` (from any thread); wake the loop unless it is already due to look."""
        with self._lock:
            self._items.append(item)
            if self._woken:
                return
            self._woken = True
            self.wakeups += 1
        self._loop.call_soon_threadsafe(self._ready.set)

    async def get(self) -> T:
        """The next item, waiting (on the loop) until one is put."""
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                self._woken = False
                self._ready.clear()
            await self._ready.wait()
