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

from app import faust_patches

faust_patches.install()  # the worker's producer settings and fixes, as app.main.build installs them


class _SlowProducer:
    """The aiokafka producer as ``hand_over`` (app/faust_patches.py) sees it: each send takes
    a while (metadata, a full accumulator) before the record is in its hands."""

    def __init__(self, sent: list[int]) -> None:
        self.sent = sent

    async def send(self, topic: str, value: bytes, **_: Any) -> asyncio.Future[Any]:
        number, delay_s = value
        await asyncio.sleep(delay_s)
        self.sent.append(number)
        return asyncio.get_running_loop().create_future()


def _slow_message(sent: list[int], number: int, delay_s: float) -> Any:
    del sent  # the buffer's producer records it
    channel = SimpleNamespace(get_topic_name=lambda: "t-changelog",
                              _on_published=lambda *a, **k: None)
    return SimpleNamespace(message=SimpleNamespace(
        channel=channel, key=b"k", value=(number, delay_s), partition=0, timestamp=None,
        headers=None))


async def _buffer(sent: list[int]) -> ProducerBuffer:
    async def maybe_start() -> None:
        return None

    producer = _SlowProducer(sent)
    buffer = ProducerBuffer()
    buffer.app = SimpleNamespace(  # type: ignore[assignment]
        conf=SimpleNamespace(producer_threaded=False),
        producer=SimpleNamespace(maybe_start=maybe_start, _ensure_producer=lambda: producer),
        sensors=SimpleNamespace(on_send_initiated=lambda *a, **k: None))
    await buffer.start()
    return buffer


async def test_flush_waits_for_slow_handovers() -> None:
    """Three writes, each 0.15 s to hand over: flush returns only when all three are out."""
    sent: list[int] = []
    buffer = await _buffer(sent)
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
    buffer = await _buffer(sent)
    try:
        buffer.put(_slow_message(sent, 0, 0.3))
        await asyncio.sleep(0.05)  # let the buffer's task take it off the queue
        assert buffer.size == 0
        await buffer.flush()
        assert sent == [0], "flush returned while a write was being handed over"
    finally:
        await buffer.stop()
