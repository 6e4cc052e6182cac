"""Offset continuity of the inputs that must lose nothing: workloads and outcomes.

Faust's consumer can skip a record across a rebalance: in the reliability suite, a workload
produced while a second worker was joining was never delivered to either worker, yet the
partition's committed offset moved past it, because Faust commits the end of the run of *acked*
offsets without checking that the run starts at the committed one (found with
tests/reliability/test_rebalance.py: one workload in about three join-and-leave runs, the
"stall" reported earlier). A dropped workload is a lost workload; a dropped outcome leaves its
workload in flight for ever.

So the stages keep their own ledger: for each input partition, the next offset they expect,
in a table partitioned like the input (written once per partition per batch, recovered with
the partition on a rebalance or a restart). A record whose offset jumps past the expected one
reveals a gap; the guard reads the skipped offsets itself with a plain consumer and hands them
to the stage *before* the record that revealed them, so they are decided, or completed, before
that record's offset can be committed. Records seen twice are harmless (the stages drop
duplicates), so a false gap (a transaction marker, a ledger written before a crash) costs only
a read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from app import observability
from app.main import settings
from app.settings import Settings
from app.streaming import event_context

logger = logging.getLogger(__name__)
READ_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SkippedMessage:
    """The parts of a Kafka record the stages read (Faust's ``event.message`` subset)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: float


class SkippedEvent:
    """A record the consumer skipped, re-read by the guard: it stands in for a Faust event in
    the stage (``.value``, ``.message``, and as the current event of its table writes, which
    land in its partition's changelog like any other event's)."""

    def __init__(self, message: SkippedMessage) -> None:
        self.message = message
        self.value = message.value
        self.key = message.key


class GapReader:
    """Reads offset ranges of input partitions with a plain consumer (no group, no commits).

    Every read is bounded as a whole, not only its fetch loop: aiokafka's ``position()``
    loops for as long as the partition has no valid position and ``getmany()`` first waits
    for any reassignment in progress, both without a bound of their own; a read stuck there
    would hold the reader's lock, and every later read with it, among them the registry's
    read-back of the heartbeats that a decider with no live device waits on (a CI run of the
    broker-kill scenario stopped routing for good right after the broker came back, with the
    decider last seen there; not confirmed as the cause). A read that overruns gives what it
    got and reports itself incomplete (the caller tries again); its consumer is stopped and
    the next read starts a fresh one.
    """

    def __init__(self, config: Settings | None = None) -> None:
        self._settings = config or settings
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def read(self, topic: str, partition: int, start: int,
                   end: int) -> tuple[list[SkippedMessage], bool]:
        """The records at offsets ``start`` ≤ offset < ``end`` that still exist, and whether
        the read got through the whole range (False: the broker did not answer in time)."""
        out: list[SkippedMessage] = []
        async with self._lock:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    await self._read_into(out, topic, partition, start, end)
                    return out, True
            except TimeoutError:
                await self._discard()
        logger.error("could not re-read %s[%d] offsets %d..%d within %.0f s (got %d); "
                     "the next batch tries again", topic, partition, start, end - 1,
                     READ_TIMEOUT_S, len(out))
        return out, False

    async def _read_into(self, out: list[SkippedMessage], topic: str, partition: int,
                         start: int, end: int) -> None:
        consumer = await self._started()
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=end - start)
            for record in batch.get(tp, []):
                if start <= record.offset < end:
                    out.append(SkippedMessage(topic, partition, record.offset, record.key,
                                              record.value, record.timestamp / 1000.0))

    async def tail(self, topic: str, partitions: Iterable[int],
                   count: int) -> list[SkippedMessage]:
        """The last ``count`` records (at most) of each of ``partitions`` of ``topic``;
        TimeoutError when the broker did not tell their ends within READ_TIMEOUT_S."""
        async with self._lock:
            tps = [TopicPartition(topic, p) for p in partitions]
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    consumer = await self._started()
                    ends = await consumer.end_offsets(tps)
            except TimeoutError:
                await self._discard()
                raise
        out: list[SkippedMessage] = []
        for tp in tps:
            end = ends.get(tp, 0)
            if end > 0:
                out += (await self.read(topic, tp.partition, max(0, end - count), end))[0]
        return out

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            config = self._settings
            consumer = AIOKafkaConsumer(
                bootstrap_servers=config.broker, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", max_partition_fetch_bytes=16 * 1024 * 1024,
                fetch_max_bytes=64 * 1024 * 1024, **config.kafka_client_kwargs())
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def _discard(self) -> None:
        """Stop the consumer of a read that overran (within a bound of its own: a consumer in
        a bad state may not stop either); the next read starts a fresh one."""
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        logger.warning("a read of the gap reader overran %.0f s; starting a fresh consumer",
                       READ_TIMEOUT_S)
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await consumer.stop()
        except (TimeoutError, KafkaError, OSError) as exc:
            logger.warning("the overrun consumer did not stop cleanly (%r); left behind", exc)

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None


reader = GapReader()


def _key(topic: str, partition: int) -> str:
    return f"{topic}#{partition}"


class OffsetGuard:
    """One stage's ledger of the next offset it expects per input partition (see the module)."""

    def __init__(self, stage: str, table: Any) -> None:
        self.stage = stage
        self.table = table
        # Gaps whose read did not complete: the ledger stays at their start, so the next batch
        # finds the gap again and reads it again (what was read is processed twice: dropped).
        self._unresolved: dict[tuple[str, int], int] = {}

    async def fill(self, events: Sequence[Any]) -> list[Any]:
        """``events`` in order, with the records the consumer skipped put back where they
        belong (before the first event past them)."""
        out: list[Any] = []
        expected: dict[tuple[str, int], int | None] = {}
        for event in events:
            message = event.message
            where = (message.topic, message.partition)
            if where not in expected:
                with event_context(event):  # the ledger entry lives in the event's partition
                    stored = self.table.get(_key(*where))
                expected[where] = int(stored) if stored is not None else None
            nxt = expected[where]
            if nxt is not None and message.offset > nxt:
                skipped, complete = await reader.read(message.topic, message.partition, nxt,
                                                      message.offset)
                if not complete:
                    self._unresolved.setdefault(where, nxt)
                logger.warning("%s: the consumer skipped %s[%d] offsets %d..%d; re-read %d "
                               "record(s) and processing them now", self.stage, message.topic,
                               message.partition, nxt, message.offset - 1, len(skipped))
                observability.inc("switchyard_skipped_records_recovered_total", len(skipped),
                                  stage=self.stage)
                out.extend(SkippedEvent(m) for m in skipped)
            out.append(event)
            expected[where] = max(nxt or 0, message.offset + 1)
        return out

    def record(self, events: Iterable[Any]) -> None:
        """Remember, per partition, the offset after the last of ``events`` (once processed)."""
        last: dict[tuple[str, int], Any] = {}
        for event in events:
            message = event.message
            where = (message.topic, message.partition)
            if where not in last or message.offset > last[where].message.offset:
                last[where] = event
        for where, event in last.items():
            unresolved = self._unresolved.pop(where, None)
            with event_context(event):
                stored = self.table.get(_key(*where))
                if unresolved is not None:
                    target = unresolved  # read the gap again next time
                elif stored is None or int(stored) <= event.message.offset:
                    target = event.message.offset + 1
                else:
                    continue  # a redelivered older record never moves the ledger back
                if stored is None or int(stored) != target:
                    self.table[_key(*where)] = target
