"""RenewingProducer's bookkeeping, with fake producers (the broker faults themselves are in
tests/reliability/test_broker_faults.py)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber

from app.producing import RenewingProducer


class FakeProducer:
    """Fails its first ``failures`` sends with ``error``."""

    def __init__(self, failures: int = 0, error: type[Exception] = OutOfOrderSequenceNumber,
                 start_error: type[Exception] | None = None) -> None:
        self.failures, self.error, self.start_error = failures, error, start_error
        self.sent: list[bytes] = []
        self.started = self.stopped = False

    async def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error()
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def send_and_wait(self, topic, value, key=None, partition=None):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        if self.failures:
            self.failures -= 1
            raise self.error()
        self.sent.append(value)
        return (topic, partition)

    async def partitions_for(self, topic):  # type: ignore[no-untyped-def]
        return {0, 1}


def factory(*made: FakeProducer):  # type: ignore[no-untyped-def]
    queue = list(made)
    built: list[FakeProducer] = []

    def build() -> FakeProducer:
        built.append(queue.pop(0))
        return built[-1]
    return build, built


async def test_a_failed_send_replaces_the_producer_and_raises() -> None:
    build, built = factory(FakeProducer(failures=5), FakeProducer())
    producer = RenewingProducer(build)  # type: ignore[arg-type]
    await producer.start()
    with pytest.raises(OutOfOrderSequenceNumber):
        await producer.send_and_wait("t", b"one")
    assert producer.renewals == 1 and producer.current is built[1]
    await producer.send_and_wait("t", b"one")  # the caller's retry goes to the new one
    assert built[1].sent == [b"one"]
    await producer.stop()
    assert built[0].stopped and built[1].stopped


async def test_concurrent_failures_replace_it_once() -> None:
    build, built = factory(FakeProducer(failures=2), FakeProducer(), FakeProducer())
    producer = RenewingProducer(build)  # type: ignore[arg-type]
    await producer.start()
    outcomes = await asyncio.gather(producer.send_and_wait("t", b"a"),
                                    producer.send_and_wait("t", b"b"), return_exceptions=True)
    assert all(isinstance(o, OutOfOrderSequenceNumber) for o in outcomes)
    assert producer.renewals == 1 and len(built) == 2
    await producer.stop()


async def test_a_replacement_that_cannot_start_is_tried_again_on_the_next_failure() -> None:
    build, built = factory(FakeProducer(failures=2),
                           FakeProducer(start_error=KafkaConnectionError), FakeProducer())
    producer = RenewingProducer(build)  # type: ignore[arg-type]
    await producer.start()
    with pytest.raises(KafkaConnectionError):  # the broker is still away
        await producer.send_and_wait("t", b"x")
    assert producer.current is built[0] and built[1].stopped
    with pytest.raises(OutOfOrderSequenceNumber):
        await producer.send_and_wait("t", b"x")
    assert producer.current is built[2] and producer.renewals == 1
    await producer.send_and_wait("t", b"x")
    assert built[2].sent == [b"x"]
    await producer.stop()
