"""At-least-once needs every table write sent before the offsets that caused it are committed.

Faust flushes its producer before committing (faust-streaming PR 273), but the flush of its
``ProducerBuffer`` (where table changelog writes wait) gives up as soon as one message takes
over 0.1 s to hand over, and does not count the message being handed over. On a loaded machine
the worker then commits an outcome's offset while its ``completed`` write — the result itself —
is still in memory: ``kill -9`` at that moment loses the result for good (seen in
test_worker_crash before the fix in app/main.py). These tests pin the flush down.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.transport.producer import ProducerBuffer

import app.main  # noqa: F401 - installs the worker's producer settings and fixes


def _slow_message(sent: list[int], number: int, delay_s: float) -> Any:
    async def publish_message(fut: Any, wait: bool = False) -> None:
        await asyncio.sleep(delay_s)
        sent.append(number)

    channel = SimpleNamespace(publish_message=publish_message)
    return SimpleNamespace(message=SimpleNamespace(channel=channel))


async def _buffer() -> ProducerBuffer:
    buffer = ProducerBuffer()
    buffer.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))  # type: ignore[assignment]
    await buffer.start()
    return buffer


async def test_flush_waits_for_slow_handovers() -> None:
    """Three writes, each 0.15 s to hand over: flush returns only when all three are out."""
    sent: list[int] = []
    buffer = await _buffer()
    try:
        for number in range(3):
            buffer.put(_slow_message(sent, number, 0.15))
        await buffer.flush()
        assert sent == [0, 1, 2], f"flush returned with {3 - len(sent)} writes still buffered"
    finally:
        await buffer.stop()


async def test_flush_waits_for_the_message_in_hand() -> None:
    """A write already taken off the queue but not yet handed over still counts."""
    sent: list[int] = []
    buffer = await _buffer()
    try:
        buffer.put(_slow_message(sent, 0, 0.3))
        await asyncio.sleep(0.05)  # let the buffer's task take it off the queue
        assert buffer.size == 0
        await buffer.flush()
        assert sent == [0], "flush returned while a write was being handed over"
    finally:
        await buffer.stop()
