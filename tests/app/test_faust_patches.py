"""The Faust patches (app/faust_patches.py) are in force in the worker's app."""

from __future__ import annotations

import asyncio
import importlib.metadata
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient
from faust.exceptions import PartitionsMismatch
from faust.tables.base import Collection
from faust.transport.drivers import aiokafka as faust_aiokafka

from app import eager, faust_patches
from app.main import app


def test_faust_version_is_the_one_the_patches_were_tested_against() -> None:
    assert importlib.metadata.version("faust-streaming").startswith(faust_patches.TESTED_FAUST)


async def test_every_faust_producer_is_idempotent() -> None:
    """The worker's producer asks aiokafka for idempotence and acks=all, at least once too."""
    producer = app.producer
    assert isinstance(producer, faust_aiokafka.Producer)
    assert app.conf.processing_guarantee.value == "at_least_once"
    assert producer._settings_extra() == {"acks": "all", "enable_idempotence": True}
    built = producer._new_producer()  # aiokafka's producer, never started
    assert built._txn_manager is not None, "aiokafka built a non-idempotent producer"
    assert built._txn_manager.transactional_id is None  # idempotence, not transactions
    await built.client.close()


def test_installing_twice_is_harmless() -> None:
    before = faust_aiokafka.Producer._settings_extra
    faust_patches.install()
    assert faust_aiokafka.Producer._settings_extra is before


def _table_with(partitions: dict[str, int | None]) -> Any:
    consumer = SimpleNamespace(topic_partitions=partitions.get)
    return SimpleNamespace(app=SimpleNamespace(consumer=consumer), name="t",
                           changelog_topic_name="t-changelog",
                           _verified_source_topics_for_partitions=set())


def test_a_changelog_not_yet_in_the_metadata_is_no_partition_mismatch() -> None:
    table = _table_with({"source": 4, "t-changelog": 0})
    Collection._verify_source_topic_partitions(table, "source")  # no PartitionsMismatch
    assert table._verified_source_topics_for_partitions == set()  # checked again next time
    table.app.consumer.topic_partitions = {"source": 4, "t-changelog": 4}.get
    Collection._verify_source_topic_partitions(table, "source")
    assert table._verified_source_topics_for_partitions == {"source"}


def test_a_real_partition_mismatch_still_raises() -> None:
    table = _table_with({"source": 4, "t-changelog": 2})
    with pytest.raises(PartitionsMismatch):
        Collection._verify_source_topic_partitions(table, "source")


class _Metadata:
    """A cluster metadata answer: ``topics`` maps each topic to its partitions."""

    def __init__(self, topics: dict[str, set[int]], asked: list[str]) -> None:
        self._topics, self._asked = topics, asked

    def topics(self) -> set[str]:
        return set(self._topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self._asked.append(topic)
        return self._topics.get(topic)


async def _declare(topics: list[str], answers: list[dict[str, set[int]]],
                   ) -> tuple[list[str], list[str], int]:
    """Declare ``topics`` through the patched Transport._create_topic against metadata that
    answers ``answers`` in turn; (created, asked about, metadata reads)."""
    replies = iter(answers)
    asked: list[str] = []
    reads = [0]

    class Client:
        async def fetch_all_metadata(self) -> Any:
            reads[0] += 1
            return _Metadata(next(replies), asked)

    created: list[str] = []
    original = faust_patches.faust_aiokafka.Transport._create_topic
    try:
        async def fake_create(self: Any, owner: Any, client: Any, topic: str, *args: Any,
                              **kwargs: Any) -> None:
            created.append(topic)
        faust_aiokafka.Transport._create_topic = fake_create
        faust_aiokafka.Transport._switchyard_waits_for_topics = False
        faust_patches.install_topic_creation_wait()
        client = Client()
        for topic in topics:
            await faust_aiokafka.Transport._create_topic(None, None, client, topic, 4, 1)
    finally:
        faust_aiokafka.Transport._create_topic = original
        faust_aiokafka.Transport._switchyard_waits_for_topics = True
    return created, asked, reads[0]


async def test_a_created_topic_is_waited_for_until_the_metadata_lists_it() -> None:
    """Faust goes on only once the broker's metadata has the topic's partitions."""
    created, asked, _ = await _declare(["t-changelog"], [
        {"other": {0}},                      # what exists before: not this topic
        {}, {"t-changelog": set()}, {"t-changelog": {0, 1, 2, 3}},  # then it appears
    ])
    assert created == ["t-changelog"]
    assert asked.count("t-changelog") == 3


async def test_topics_that_exist_are_not_created_again_and_metadata_is_read_once() -> None:
    """A restarting worker declares every topic again: one metadata read settles them."""
    existing = {"a": {0, 1}, "b": {0}, "c": {0, 1, 2, 3}}
    created, _, reads = await _declare(["a", "b", "c", "a"], [existing])
    assert created == [] and reads == 1


class _Consumer:
    """Records the order of the two calls the recovery patch reorders."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def resume_partitions(self, tps: Any) -> None:
        self.calls.append(("resume", sorted(tps)))

    async def perform_seek(self) -> None:
        self.calls.append(("seek", None))


async def test_stream_partitions_resume_only_after_the_seek() -> None:
    """Faust's order (resume, then seek) becomes seek, then resume: nothing is fetched from
    where the driver stood before the committed offsets are in place."""
    consumer = _Consumer()

    async def faust_order() -> None:
        consumer.resume_partitions({"workloads-1", "workloads-0"})
        consumer.calls.append(("between", None))
        await consumer.perform_seek()

    await faust_patches.seeking_first(consumer, faust_order)
    assert consumer.calls == [("between", None), ("seek", None),
                              ("resume", ["workloads-0", "workloads-1"])]
    assert "resume_partitions" not in vars(consumer) and "perform_seek" not in vars(consumer)


async def test_partitions_resume_even_when_nothing_is_sought() -> None:
    consumer = _Consumer()

    async def no_assignment() -> None:
        consumer.resume_partitions({"workloads-0"})

    await faust_patches.seeking_first(consumer, no_assignment)
    assert consumer.calls == [("resume", ["workloads-0"])]


def test_faust_still_resumes_before_it_seeks() -> None:
    """The race the patch closes is still in Faust's code (if an upgrade fixes it, the patch
    can go), and the patch is installed."""
    import inspect

    from faust.tables.recovery import Recovery

    assert Recovery._switchyard_seek_first  # type: ignore[attr-defined]
    source = inspect.getsource(Recovery.on_recovery_completed.__wrapped_original__)  # type: ignore[attr-defined]
    assert source.index("resume_partitions") < source.index("perform_seek")


async def test_take_batches_hands_over_at_once_in_order_up_to_the_limit() -> None:
    """``take_batches`` (the decide and complete stages): the first event goes at once (no
    timer), what queued up while the agent worked is the next batch, never more than the
    limit, every event once and in order, each acknowledged after its batch was processed."""
    import asyncio

    import faust

    test_app = faust.App("switchyard-test-take-batches", store="memory://")
    got: list[list[int]] = []
    acked: list[int] = []
    acked_while_working: list[bool] = []

    @test_app.agent()
    async def collect(stream: Any) -> Any:
        ack = stream.ack

        async def spy(event: Any) -> bool:
            acked.append(event.value)
            return bool(await ack(event))

        stream.ack = spy
        async for batch in faust_patches.take_batches(stream, 3):
            got.append([event.value for event in batch])
            acked_while_working.append(any(event.value in acked for event in batch))
            await asyncio.sleep(0.05)  # the agent at work: the next events queue up
            yield len(batch)

    async with collect.test_context() as agent:
        await agent.put(0, wait=False)
        for _ in range(250):  # a lone event goes without a full batch or a later event
            if got:
                break
            await asyncio.sleep(0.02)
        assert got == [[0]]
        for i in range(1, 8):
            await agent.put(i, wait=False)
        for _ in range(100):
            if sum(map(len, got)) == 8:
                break
            await asyncio.sleep(0.02)
    assert got[0] == [0]
    assert [v for batch in got for v in batch] == list(range(8))
    assert all(1 <= len(batch) <= 3 for batch in got)
    assert len(got) < 8  # later events were batched, not handed over one by one
    assert not any(acked_while_working)
    assert acked == list(range(8))  # each once, in order, after its batch


async def test_take_batches_gathers_events_that_arrive_a_turn_or_two_apart() -> None:
    """Faust's fetcher hands a stream about one record per turn of the event loop: a backlog
    delivered that way joins one batch (up to the limit) rather than going a few events at a
    time, which had left a backlogged decide stage in a steady state of tiny batches."""
    import asyncio

    import faust

    test_app = faust.App("switchyard-test-take-batches-trickle", store="memory://")
    got: list[list[int]] = []

    @test_app.agent()
    async def collect(stream: Any) -> Any:
        async for batch in faust_patches.take_batches(stream, 100):
            got.append([event.value for event in batch])
            yield len(batch)

    async with collect.test_context() as agent:
        for i in range(40):
            await agent.put(i, wait=False)
            for _ in range(2):  # the next record comes a couple of turns later
                await asyncio.sleep(0)
        for _ in range(100):
            if sum(map(len, got)) == 40:
                break
            await asyncio.sleep(0.02)
    assert [v for batch in got for v in batch] == list(range(40))
    assert len(got) <= 3, [len(batch) for batch in got]


async def test_take_batches_lingers_for_a_fuller_batch_when_asked() -> None:
    import asyncio

    import faust

    test_app = faust.App("switchyard-test-take-batches-linger", store="memory://")
    got: list[list[int]] = []

    @test_app.agent()
    async def collect(stream: Any) -> Any:
        async for batch in faust_patches.take_batches(stream, 4, linger_s=0.5):
            got.append([event.value for event in batch])
            yield len(batch)

    async with collect.test_context() as agent:
        async def trickle() -> None:
            for i in range(4):
                await agent.put(i, wait=False)
                await asyncio.sleep(0.02)
        await asyncio.wait_for(trickle(), 5)
        for _ in range(100):
            if sum(map(len, got)) == 4:
                break
            await asyncio.sleep(0.02)
    assert got == [[0, 1, 2, 3]]  # waited for the batch to fill, within the linger


def _app_with_consumer(coordinator_id: int | None, client: Any = None) -> Any:
    coordinator = SimpleNamespace(coordinator_id=coordinator_id,
                                  _coordinator_lookup_lock=asyncio.Lock())
    consumer = SimpleNamespace(_coordinator=coordinator, _client=client)
    thread = SimpleNamespace(_consumer=consumer, thread_loop=asyncio.get_running_loop())
    return SimpleNamespace(consumer=SimpleNamespace(_thread=thread))


async def test_the_coordinator_watch_reports_only_a_coordinator_unknown_too_long() -> None:
    watch = faust_patches.CoordinatorWatch(after_s=30.0)
    known = _app_with_consumer(1)
    assert not watch.check(known, 0.0) and not watch.check(known, 100.0)
    assert watch.unknown_since is None
    lost = _app_with_consumer(None)
    lost.consumer._thread._consumer._client = None
    assert not watch.check(lost, 100.0)  # first seen unknown: the clock starts
    assert not watch.check(lost, 129.0)
    watch.report_and_wake = lambda *args: None  # type: ignore[method-assign]
    assert watch.check(lost, 131.0) and watch.reports == 1
    assert not watch.check(lost, 140.0)  # the next report only after another after_s
    assert not watch.check(known, 141.0) and watch.unknown_since is None  # found again


async def test_the_coordinator_watch_restarts_a_dead_metadata_synchronizer() -> None:
    """The client's synchronizer task died: nothing would serve a forced metadata update."""
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")

    async def died() -> None:
        raise RuntimeError("synchronizer died")
    client._sync_task = asyncio.create_task(died())
    await asyncio.sleep(0)
    assert faust_patches.metadata_state(client)["sync_task_error"] == "RuntimeError('synchronizer died')"
    app = _app_with_consumer(None, client)
    watch = faust_patches.CoordinatorWatch(after_s=0.0)
    watch.report_and_wake(app.consumer._thread._consumer, asyncio.get_running_loop())
    assert not client._sync_task.done()  # a new synchronizer runs
    update = client.force_metadata_update()  # and it serves forced updates again
    assert await asyncio.wait_for(update, 5) is False  # nothing listens on port 1
    client._sync_task.cancel()
    await client.close()


async def test_the_coordinator_watch_wakes_a_synchronizer_that_sleeps_through_an_update() -> None:
    """A forced update is pending while the synchronizer waits on a waiter nobody will set."""
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", metadata_max_age_ms=600_000)
    client._sync_task = asyncio.create_task(client._md_synchronizer())
    await asyncio.sleep(0)  # asleep on its waiter, for metadata_max_age_ms
    client._md_update_fut = asyncio.get_running_loop().create_future()  # the lost wake-up
    update = asyncio.shield(client._md_update_fut)
    assert faust_patches.metadata_state(client) == {
        "sync_task_done": False, "sync_task_error": None, "update_pending": True,
        "waiter_done": False}
    app = _app_with_consumer(None, client)
    faust_patches.CoordinatorWatch(after_s=0.0).report_and_wake(
        app.consumer._thread._consumer, asyncio.get_running_loop())
    assert await asyncio.wait_for(update, 5) is False
    client._sync_task.cancel()
    await client.close()


async def test_a_task_is_reported_with_the_frames_it_waits_in() -> None:
    gate = asyncio.Event()

    async def inner() -> None:
        await gate.wait()

    async def outer() -> None:
        await inner()
    task = asyncio.create_task(outer(), name="stuck")
    await asyncio.sleep(0)
    line = next(s for s in faust_patches._task_stacks(asyncio.get_running_loop())
                if s.startswith("stuck:"))
    assert "outer:" in line and "inner:" in line and "wait:" in line
    gate.set()
    await task


def test_send_record_relies_on_faust_producer_internals_that_exist() -> None:
    """``send_record`` hands routes to the aiokafka producer under Faust's (its private
    ``_ensure_producer``), and Faust's pre-commit flush must wait for that producer too."""
    import inspect

    from faust.transport.consumer import Consumer
    from faust.transport.drivers.aiokafka import Producer

    assert callable(Producer._ensure_producer) and callable(Producer.maybe_start)
    flush = inspect.getsource(Producer.flush)
    assert "self.buffer.flush()" in flush and "self._producer.flush()" in flush
    commit = inspect.getsource(Consumer._commit_offsets)
    assert commit.index("self.app.producer.flush()") < commit.index("self._commit(")


def _service_like() -> Any:
    """What ``Service.wait_first`` reads of its service."""
    return SimpleNamespace(_stopped=asyncio.Event(), _crashed=asyncio.Event(),
                           loop=asyncio.get_running_loop())


async def test_a_message_the_streams_have_room_for_is_delivered_without_a_task() -> None:
    from faust.transport.consumer import Consumer

    delivered: list[str] = []
    tasks_before = len(asyncio.all_tasks())

    async def callback() -> str:
        delivered.append("m")
        return "done"

    suspend = asyncio.Event()
    other = suspend.wait()
    finished, result = eager.start(
        Consumer.wait_first(_service_like(), callback(), other))
    assert finished, "the delivery waited for the event loop"
    assert delivered == ["m"] and result.done and result.results == ["done"]
    assert not result.stopped
    assert other.cr_frame is None  # the suspend-flow wait was closed, never left pending
    assert len(asyncio.all_tasks()) == tasks_before


async def test_a_delivery_that_must_wait_is_still_interrupted_by_suspended_flow() -> None:
    """A full stream buffer: Faust's own wait_first takes over, so a rebalance (the
    suspend-flow event) still ends the wait, and the delivery is cancelled."""
    from faust.transport.consumer import Consumer

    room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cancelled: list[bool] = []

    async def callback() -> None:
        try:
            await room
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    suspend = asyncio.Event()
    waiting = asyncio.ensure_future(Consumer.wait_first(_service_like(), callback(),
                                                        suspend.wait()))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    suspend.set()
    result = await asyncio.wait_for(waiting, 1.0)
    await asyncio.sleep(0)
    assert len(result.done) == 1 and cancelled == [True]


async def test_a_delivery_that_waits_completes_when_the_stream_has_room_again() -> None:
    from faust.transport.consumer import Consumer

    room: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def callback() -> str:
        return await room

    waiting = asyncio.ensure_future(Consumer.wait_first(_service_like(), callback(),
                                                        asyncio.Event().wait()))
    await asyncio.sleep(0.01)
    room.set_result("in")
    result = await asyncio.wait_for(waiting, 1.0)
    assert result.results == ["in"] and not result.stopped


def test_faust_still_delivers_each_message_through_wait_first() -> None:
    import inspect

    from faust.transport.consumer import Consumer

    drain = inspect.getsource(Consumer._drain_messages)
    assert "self.wait_first(" in drain and "callback(message)" in drain
    assert "self.suspend_flow.wait()" in drain


class _FakeAiokafka:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.deliveries: list[asyncio.Future[Any]] = []

    async def send(self, topic: str, value: bytes, *, key: bytes | None, partition: int | None,
                   timestamp_ms: int | None, headers: Any) -> asyncio.Future[Any]:
        self.sent.append((topic, key, value, partition, timestamp_ms, headers))
        delivery: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.deliveries.append(delivery)
        return delivery


def _changelog_write(**fields: Any) -> tuple[_FakeAiokafka, Any, Any]:
    """A fake aiokafka producer, an app whose Faust producer hands records to it, and a
    buffered table write (``FutureMessage``) with ``fields``."""
    aiokafka = _FakeAiokafka()

    async def maybe_start() -> None:
        return None

    fake_app = SimpleNamespace(
        producer=SimpleNamespace(maybe_start=maybe_start, _ensure_producer=lambda: aiokafka),
        sensors=app.sensors)
    topic = app.topic("eager-test-changelog", key_type=bytes, value_type=bytes,
                      key_serializer="raw", value_serializer="raw")
    return aiokafka, fake_app, topic.as_future_message(key=b"k", value=b"v", **fields)


async def test_a_table_write_is_handed_to_the_producer_in_one_step_and_settled_by_faust() -> None:
    """``hand_over`` (the producer buffer's drain, app/faust_patches.py): the changelog write
    leaves without the event loop turning, and its acknowledgement settles Faust's future
    message and runs its callback (for a table: the store's persisted offset)."""
    called: list[Any] = []
    aiokafka, fake_app, fut = _changelog_write(partition=3, timestamp=12.5,
                                               callback=called.append)
    finished, _ = eager.start(faust_patches.hand_over(fake_app, fut))
    assert finished, "handing over a buffered write waited for the event loop"
    assert aiokafka.sent == [("eager-test-changelog", b"k", b"v", 3, 12500, None)]
    assert not fut.done()
    metadata = SimpleNamespace(topic="eager-test-changelog", partition=3, offset=41,
                               timestamp=12500, timestamp_type=0)
    aiokafka.deliveries[0].set_result(metadata)
    await asyncio.sleep(0)
    assert fut.done() and fut.result() is metadata
    assert called == [fut]


async def test_a_refused_table_write_fails_its_future_message() -> None:
    aiokafka, fake_app, fut = _changelog_write(partition=0)
    await faust_patches.hand_over(fake_app, fut)
    aiokafka.deliveries[0].set_exception(RuntimeError("broker said no"))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="broker said no"):
        fut.result()


def test_hand_over_relies_on_faust_internals_that_exist() -> None:
    import inspect

    from faust.topics import Topic
    from faust.transport.producer import ProducerBuffer

    assert callable(Topic._on_published)
    published = inspect.getsource(Topic._on_published)
    assert "message.set_result(res)" in published and "message.message.callback" in published
    pending = inspect.getsource(ProducerBuffer._handle_pending.fun)
    assert "await send_pending(msg)" in pending


class _FakeStore(dict):  # type: ignore[type-arg]
    """A table's serialised store as ``write_through`` uses it."""

    def __init__(self) -> None:
        super().__init__()
        self.persisted: list[tuple[Any, int]] = []

    def set_persisted_offset(self, tp: Any, offset: int) -> None:
        self.persisted.append((tp, offset))


def _bytes_table(partition: int) -> Any:
    return SimpleNamespace(partition_for_key=lambda key: partition, data=_FakeStore(),
                           changelog_topic=SimpleNamespace(get_topic_name=lambda: "t-results"))


def _acked(partition: int, offset: int) -> Any:
    return SimpleNamespace(partition=partition, offset=offset,
                           topic_partition=("t-results", partition))


async def test_a_write_through_stores_the_value_and_sends_its_changelog_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``write_through`` (the completed table's results): the value is in the store at once,
    its changelog record is handed to the aiokafka producer on the partition Faust picks for
    the key, and the store's persisted offset follows the acknowledgements, at most every
    PERSIST_INTERVAL_S (the newest acknowledged offset)."""
    aiokafka, fake_app, _ = _changelog_write(partition=0)
    table = _bytes_table(partition=2)
    clock = [100.0]
    monkeypatch.setattr(faust_patches, "_clock", lambda: clock[0])
    monkeypatch.setattr(faust_patches, "_persisted_at", {})
    finished, delivery = eager.start(faust_patches.write_through(fake_app, table, b"w1", b"{}"))
    assert finished, "a write through waited for the event loop"
    assert table.data[b"w1"] == b"{}"
    assert aiokafka.sent == [("t-results", b"w1", b"{}", 2, None, None)]
    second = await faust_patches.write_through(fake_app, table, b"w2", b"[]")
    third = await faust_patches.write_through(fake_app, table, b"w3", b"1")
    aiokafka.deliveries[0].set_result(_acked(2, 40))
    aiokafka.deliveries[1].set_result(_acked(2, 41))
    await asyncio.sleep(0)
    assert table.data.persisted == [(("t-results", 2), 40)], "written at once, then held back"
    clock[0] += faust_patches.PERSIST_INTERVAL_S + 0.001
    aiokafka.deliveries[2].set_result(_acked(2, 42))
    await asyncio.sleep(0)
    assert table.data.persisted[-1] == (("t-results", 2), 42)
    assert delivery is aiokafka.deliveries[0] and second is aiokafka.deliveries[1]
    assert third.done()


async def test_a_refused_write_through_is_reported_by_the_deliveries_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A changelog record the producer gave up on moves no persisted offset, and the writer's
    ``Deliveries.check`` raises (the complete stage then stops the worker: no offset is
    committed past a result the broker does not hold)."""
    from app.producing import Deliveries

    monkeypatch.setattr(faust_patches, "_persisted_at", {})
    aiokafka, fake_app, _ = _changelog_write(partition=0)
    table = _bytes_table(partition=0)
    sent = Deliveries("a result")
    sent.add(await faust_patches.write_through(fake_app, table, b"w1", b"{}"))
    sent.add(await faust_patches.write_through(fake_app, table, b"w2", b"{}"))
    sent.check()
    assert len(sent) == 2
    aiokafka.deliveries[0].set_result(_acked(0, 7))
    await asyncio.sleep(0)
    sent.check()
    assert len(sent) == 1, "an acknowledged record is forgotten"
    aiokafka.deliveries[1].set_exception(RuntimeError("broker said no"))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="a result could not be published.*broker said no"):
        sent.check()
    assert table.data.persisted == [(("t-results", 0), 7)]


def test_write_through_relies_on_faust_table_internals_that_exist() -> None:
    """What ``write_through`` stands in for: Faust's table write is the changelog send
    (``on_key_set``) and the store write; the partition comes from ``partition_for_key``
    and an acknowledgement only sets the store's persisted offset (at-least-once)."""
    import inspect

    from faust.stores.rocksdb import Store
    from faust.tables.base import Collection
    from faust.tables.table import Table
    from mode.utils.collections import ManagedUserDict

    setitem = inspect.getsource(ManagedUserDict.__setitem__)
    assert "self.on_key_set(key, value)" in setitem and "self.data[key] = value" in setitem
    on_key_set = inspect.getsource(Table.on_key_set)
    assert "self.send_changelog(self.partition_for_key(key), key, value)" in on_key_set
    sent = inspect.getsource(Collection._on_changelog_sent)
    assert "self.data.set_persisted_offset(res.topic_partition, res.offset)" in sent
    assert callable(Store.set_persisted_offset) and callable(Collection.partition_for_key)


@pytest.mark.kafka
def test_the_seek_to_committed_rewinds_partitions_nobody_committed(broker, unique) -> None:
    """Read past records without committing (what a fetch that came back across a rebalance
    did, before Faust dropped its records): the seek Faust makes at the end of a recovery puts
    an uncommitted partition back at its start, a committed one at its commit, and leaves the
    partitions of ``keep_topics`` (the tables' changelogs) where they were."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    from tests.integration.kafka_io import create_topics

    stream, changelog = f"seek-{unique}", f"seek-{unique}-changelog"
    tps = [TopicPartition(stream, 0), TopicPartition(stream, 1), TopicPartition(changelog, 0)]

    async def scenario() -> dict[TopicPartition, int]:
        await create_topics(broker, [stream], partitions=2)
        await create_topics(broker, [changelog])
        producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
        await producer.start()
        try:
            for tp in tps:
                for n in range(6):
                    await producer.send_and_wait(tp.topic, b"r%d" % n, partition=tp.partition)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=f"seek-{unique}",
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign(tps)
            await consumer.commit({tps[1]: OffsetAndMetadata(4, "")})
            consumer.seek(tps[1], 0)
            read = 0
            while read < 18:
                batch = await consumer.getmany(timeout_ms=2000)
                assert batch, "the records were not read back"
                read += sum(len(records) for records in batch.values())
            assert [await consumer.position(tp) for tp in tps] == [6, 6, 6]
            committed = await faust_patches.seek_to_committed_or_start(consumer, {changelog})
            assert committed == {tps[0]: None, tps[1]: 4, tps[2]: None}
            return {tp: await consumer.position(tp) for tp in tps}
        finally:
            await consumer.stop()

    positions = asyncio.run(scenario())
    assert positions == {tps[0]: 0, tps[1]: 4, tps[2]: 6}


def test_faust_seeks_through_the_consumer_thread_patch() -> None:
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    faust_patches.install()
    assert getattr(AIOKafkaConsumerThread.seek_to_committed, "_switchyard", False)
    assert app.conf.consumer_auto_offset_reset == "earliest"


async def test_a_failed_delivery_crashes_the_worker_and_stops_the_stage() -> None:
    """``Deliveries.failed``: nothing failed → False; a record the producer gave up on → the
    app is crashed with the error, and True (the stage returns)."""
    from app.producing import Deliveries

    crashed: list[BaseException] = []

    async def crash(exc: BaseException) -> None:
        crashed.append(exc)

    fake_app = SimpleNamespace(crash=crash)
    sent = Deliveries("a route")
    ok: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    ok.set_result(None)
    sent.add(ok)
    assert not await sent.failed(fake_app) and not crashed and len(sent) == 0
    bad: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    bad.set_exception(RuntimeError("no leader"))
    sent.add(bad)
    assert await sent.failed(fake_app)
    assert len(crashed) == 1 and "a route could not be published" in str(crashed[0])


_UNLOGGED_WRITER = """
import asyncio, logging, os, sys
from types import SimpleNamespace
from app import faust_patches
faust_patches.install_unlogged_table_writes()
from faust.stores.rocksdb import RocksDBOptions, Store
db = RocksDBOptions().open(sys.argv[1])
db.put(b"result", b"kept")
if sys.argv[2] == "stop":
    asyncio.run(Store.stop(SimpleNamespace(_dbs={0: db}, logger=logging.getLogger())))
os._exit(0)  # no close, no destructor: what survives is what reached the disk
"""


def _written_then_exited(path: Any, how: str) -> bytes | None:
    import subprocess
    import sys

    import rocksdict

    subprocess.run([sys.executable, "-c", _UNLOGGED_WRITER, str(path), how], check=True,
                   timeout=60)
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    try:
        return db.get(b"result")
    finally:
        db.close()


def test_table_writes_skip_the_wal_and_a_stopping_store_flushes_them(tmp_path: Any) -> None:
    """Without the WAL a put that was never flushed dies with the process (the changelog is
    the log: recovery replays it); Faust's Store.stop, patched, flushes before letting go."""
    assert _written_then_exited(tmp_path / "exited", "exit") is None, "the put went to a WAL"
    assert _written_then_exited(tmp_path / "stopped", "stop") == b"kept"


def test_a_revoked_partition_is_flushed_before_faust_drops_it() -> None:
    import logging

    from faust.stores.rocksdb import RocksDBOptions, Store
    from faust.types import TP

    flushed: list[bool] = []
    db = SimpleNamespace(flush=lambda wait: flushed.append(wait))
    other = SimpleNamespace(flush=lambda wait: pytest.fail("flushed a partition kept"))
    table = SimpleNamespace(changelog_topic=SimpleNamespace(topics={"t-changelog"}))
    store = SimpleNamespace(_dbs={3: db, 4: other}, logger=logging.getLogger())
    Store.revoke_partitions(store, table, {TP("t-changelog", 3)})
    assert flushed == [True] and set(store._dbs) == {4}
    assert getattr(RocksDBOptions, "_switchyard_unlogged", False)
