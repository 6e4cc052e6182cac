"""An idempotent Kafka producer that survives a broker fault.

aiokafka's idempotent producer numbers every batch per partition. Once a batch it numbered is
given up on (a request timeout, a connection lost mid-request) and the caller sends its record
again, the new batch carries the *next* number while the broker is still waiting for the one
given up: the broker answers OutOfOrderSequenceNumber to that batch and to every later one,
for good (aiokafka has no epoch bump; aio-libs/aiokafka#1017). Seen here after a broker
restart: an executor retried its metric forever (tests/reliability/test_broker_faults.py).

So when a send fails, the producer is replaced by a new one (a new producer id, numbers from
zero) before the caller retries. Duplicates stay impossible within one producer's life; across
a replacement, a record whose first send the broker did append can be appended once more.
Outcomes are deduplicated by workload id before switchyard.results; a repeated metric is
learned twice (one extra sample, only after a broker fault).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

logger = logging.getLogger(__name__)
# How long a replaced producer may take to stop (it may still hold batches for a broker
# that is away); it is stopped in the background either way.
STOP_TIMEOUT_S = 5.0


class RenewingProducer:
    """``send_and_wait`` and ``partitions_for`` of an idempotent AIOKafkaProducer that is
    replaced after a failed send (see the module)."""

    def __init__(self, factory: Callable[[], AIOKafkaProducer]) -> None:
        self._factory = factory
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self._retired: set[asyncio.Task[None]] = set()
        self.renewals = 0

    async def start(self) -> None:
        self._producer = self._factory()
        await self._producer.start()

    @property
    def current(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("producer not started")
        return self._producer

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None,
                            partition: int | None = None) -> Any:
        """Send one record and wait for the broker's ack. On a KafkaError the producer is
        replaced, then the error is raised: the caller decides whether to send again."""
        producer = self.current
        try:
            return await producer.send_and_wait(topic, value, key=key, partition=partition)
        except KafkaError:
            await self._renew(producer)
            raise

    async def partitions_for(self, topic: str) -> set[int]:
        return await self.current.partitions_for(topic)

    async def _renew(self, failed: AIOKafkaProducer) -> None:
        async with self._lock:
            if failed is not self._producer:
                return  # a concurrent send already replaced it
            fresh = self._factory()
            try:
                await fresh.start()  # fails while the broker is away: renewed next time
            except BaseException:
                await self._stop_quietly(fresh)
                raise
            self._producer = fresh
            self.renewals += 1
            logger.warning("a send failed: the idempotent producer is replaced (renewal %d)",
                           self.renewals)
            task = asyncio.create_task(self._stop_quietly(failed))
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)

    @staticmethod
    async def _stop_quietly(producer: AIOKafkaProducer) -> None:
        with contextlib.suppress(Exception, asyncio.TimeoutError):
            await asyncio.wait_for(producer.stop(), STOP_TIMEOUT_S)

    async def stop(self) -> None:
        if self._retired:
            await asyncio.gather(*self._retired, return_exceptions=True)
        if self._producer is not None:
            await self._producer.stop()


class Deliveries:
    """Records handed to a producer and not awaited (routes, results): ``check`` raises the
    error of one the producer gave up on — the caller then stops the worker, so that no
    offset is committed past a record the broker does not hold — and forgets the
    acknowledged ones."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._pending: list[asyncio.Future[Any]] = []

    def add(self, delivery: asyncio.Future[Any]) -> None:
        self._pending.append(delivery)

    def check(self) -> None:
        pending = []
        for delivery in self._pending:
            if not delivery.done():
                pending.append(delivery)
            elif not delivery.cancelled() and delivery.exception() is not None:
                raise RuntimeError(f"{self.what} could not be published: "
                                   f"{delivery.exception()!r}")
        self._pending[:] = pending

    async def failed(self, app: Any) -> bool:
        """Whether a record failed (``check``); if so the worker ``app`` is crashed (logged as
        critical) and the caller's stage must stop."""
        try:
            self.check()
        except RuntimeError as exc:
            logger.critical("%s; stopping the worker", exc)
            await app.crash(exc)
            return True
        return False

    def __len__(self) -> int:
        return len(self._pending)
