"""The offset guard: records a consumer skipped are found, re-read from the broker and put back
in order before the record that revealed the gap (app/gaps.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaProducer

from app import gaps
from app.admin import ensure_topics
from app.settings import Settings


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    value: bytes = b""
    key: bytes | None = None


class Event:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.message = Message(topic, partition, offset, f"v{offset}".encode())
        self.value = self.message.value


def offsets(events: list) -> list[tuple[int, int]]:
    return [(e.message.partition, e.message.offset) for e in events]


def test_no_ledger_yet_means_no_gap_and_the_ledger_follows_the_batch():
    table: dict[str, int] = {}
    guard = gaps.OffsetGuard("test", table)
    batch = [Event("t", 0, 7), Event("t", 1, 3), Event("t", 0, 8)]
    assert asyncio.run(guard.fill(batch)) == batch  # nothing known: nothing to repair
    guard.record(batch)
    assert table == {"t#0": 9, "t#1": 4}
    guard.record([Event("t", 0, 2)])  # a redelivered older record never moves the ledger back
    assert table["t#0"] == 9


def test_skipped_offsets_are_read_back_before_the_record_past_them(monkeypatch):
    asked: list[tuple[str, int, int, int]] = []

    async def read(topic: str, partition: int, start: int, end: int):
        asked.append((topic, partition, start, end))
        return [gaps.SkippedMessage(topic, partition, o, None, b"x", 0.0)
                for o in range(start, end)], True

    monkeypatch.setattr(gaps.reader, "read", read)
    table = {"t#0": 5, "t#1": 3}
    guard = gaps.OffsetGuard("test", table)
    batch = [Event("t", 1, 3), Event("t", 0, 8), Event("t", 0, 9), Event("t", 1, 4)]
    filled = asyncio.run(guard.fill(batch))
    assert asked == [("t", 0, 5, 8)]  # partition 1 was contiguous: not read
    assert offsets(filled) == [(1, 3), (0, 5), (0, 6), (0, 7), (0, 8), (0, 9), (1, 4)]
    assert all(isinstance(e, gaps.SkippedEvent) for e in filled[1:4])
    guard.record(filled)
    assert table == {"t#0": 10, "t#1": 5}


def test_redelivered_records_below_the_ledger_are_not_a_gap(monkeypatch):
    async def read(*args):  # pragma: no cover - must not be called
        raise AssertionError(f"no gap expected, read {args}")

    monkeypatch.setattr(gaps.reader, "read", read)
    guard = gaps.OffsetGuard("test", {"t#0": 20})
    batch = [Event("t", 0, 12), Event("t", 0, 13), Event("t", 0, 20)]
    assert asyncio.run(guard.fill(batch)) == batch


@pytest.mark.kafka
def test_reader_reads_exactly_the_range_from_the_broker(broker, unique):
    topic = f"gaps-{unique}"

    async def scenario() -> list[gaps.SkippedMessage]:
        await ensure_topics(Settings(broker=broker), {topic: 2})
        producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
        await producer.start()
        try:
            for n in range(10):
                await producer.send_and_wait(topic, f"r{n}".encode(), key=b"k", partition=1)
        finally:
            await producer.stop()
        reader = gaps.GapReader(Settings(broker=broker))
        try:
            got, complete = await reader.read(topic, 1, 3, 7)
            again, complete_again = await reader.read(topic, 1, 8, 10)  # the reader is reused
            assert complete and complete_again
        finally:
            await reader.close()
        return got + again

    got = asyncio.run(scenario())
    assert [(m.offset, m.value) for m in got] == [
        (3, b"r3"), (4, b"r4"), (5, b"r5"), (6, b"r6"), (8, b"r8"), (9, b"r9")]
    assert all(m.topic == topic and m.partition == 1 for m in got)


def test_an_incomplete_read_is_tried_again_by_the_next_batch(monkeypatch):
    """The broker did not answer in time: the ledger stays at the gap, so the next batch
    finds the gap again (and reads it again, the part already read included)."""
    reads: list[tuple[int, int]] = []

    async def read(topic: str, partition: int, start: int, end: int):
        reads.append((start, end))
        got = [gaps.SkippedMessage(topic, partition, start, None, b"x", 0.0)]
        return (got, False) if len(reads) == 1 else (got, True)

    monkeypatch.setattr(gaps.reader, "read", read)
    table = {"t#0": 5}
    guard = gaps.OffsetGuard("test", table)
    first = asyncio.run(guard.fill([Event("t", 0, 8)]))
    guard.record(first)
    assert table["t#0"] == 5
    second = asyncio.run(guard.fill([Event("t", 0, 9)]))
    guard.record(second)
    assert reads == [(5, 8), (5, 9)] and table["t#0"] == 10


class StuckConsumer:
    """A consumer in the state a broker restart once left one in: ``position()`` never
    answers (aiokafka's loops without a bound). Fake Kafka client: unit test of the reader's
    bounds only."""

    made: list[StuckConsumer] = []

    def __init__(self, **_: object) -> None:
        self.stopped = False
        StuckConsumer.made.append(self)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, tps: list) -> None:
        pass

    def seek(self, tp: object, offset: int) -> None:
        pass

    async def position(self, tp: object) -> int:
        await asyncio.Event().wait()  # for ever
        raise AssertionError("unreachable")

    async def end_offsets(self, tps: list) -> dict:
        return {tp: 10 for tp in tps}


def test_a_read_that_never_returns_is_cut_off_and_its_consumer_replaced(monkeypatch):
    """A read stuck in the consumer must not hold the reader's lock (and every later read,
    the decider's read-back of heartbeats among them) for ever: it gives up after
    READ_TIMEOUT_S, says it is incomplete, and the next one starts a fresh consumer."""
    monkeypatch.setattr(gaps, "AIOKafkaConsumer", StuckConsumer)
    monkeypatch.setattr(gaps, "READ_TIMEOUT_S", 0.2)
    StuckConsumer.made.clear()
    reader = gaps.GapReader(Settings())

    async def scenario() -> tuple:
        first = await asyncio.wait_for(reader.read("t", 0, 3, 7), 5)
        tail = await asyncio.wait_for(reader.tail("t", [0, 1], 4), 5)  # the lock was released
        return first, tail

    (got, complete), tail = asyncio.run(scenario())
    assert got == [] and complete is False
    assert tail == []
    # One consumer per overrun read (the first read's, and one per partition of the tail),
    # each stopped when it overran.
    assert len(StuckConsumer.made) == 3 and all(c.stopped for c in StuckConsumer.made)


def test_a_tail_whose_ends_never_come_raises_timeout(monkeypatch):
    """The broker does not tell the partitions' ends: TimeoutError, which the registry's
    read-back takes for "the broker could not be read" (agents/registry.py)."""

    class NoEnds(StuckConsumer):
        async def end_offsets(self, tps: list) -> dict:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    monkeypatch.setattr(gaps, "AIOKafkaConsumer", NoEnds)
    monkeypatch.setattr(gaps, "READ_TIMEOUT_S", 0.2)
    StuckConsumer.made.clear()
    reader = gaps.GapReader(Settings())
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(reader.tail("t", [0], 4), 5))
    assert [c.stopped for c in StuckConsumer.made] == [True]
