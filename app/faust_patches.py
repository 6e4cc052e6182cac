"""Every Faust internal Switchyard relies on or changes, in one place.

Tested against faust-streaming 0.15.x (pyproject bounds the dependency to it): each patch
names the private attribute it touches, so an upgrade that moves one fails here, loudly,
instead of silently losing a guarantee.

- ``install_idempotent_producer``: Faust's producers are idempotent (``enable_idempotence``,
  ``acks=all``) under at-least-once too. Faust turns idempotence on only for exactly-once
  (``Producer._settings_extra``), so a produce request retried across a broker restart was
  appended twice: the ``completed`` table's changelog is the results topic, and a retried
  changelog batch was a second result for the same workload (issue 11; pinned by
  tests/reliability/test_broker_faults.py and tests/app/test_faust_patches.py).
- ``install_draining_flush``: the pre-commit flush waits for every buffered table write, and
  the buffer hands its writes to the aiokafka producer in one step each (``hand_over``).
- ``install_patient_partition_check``: a table write made before the consumer's metadata
  knows the table's (just created) changelog topic is not taken for a partition mismatch.
- ``install_topic_creation_wait``: a topic Faust creates is in the broker's metadata before
  Faust goes on (and subscribes to it).
- ``install_static_member_leave``: a worker with a static group-membership id still leaves
  the group when it stops cleanly (aiokafka skips the LeaveGroup for static members).
- ``install_seek_before_resume``: at the end of a table recovery the stream partitions are
  sought to their committed offsets *before* they are fetched again, not after.
- ``install_uncommitted_seek_to_start``: that seek also rewinds a stream partition nobody has
  committed yet (aiokafka leaves it where the fetcher got to, past records Faust dropped).
- ``take_batches``: what the decide and complete stages iterate instead of ``take_events``:
  the same buffering, back-pressure and acknowledgement, but a batch is handed over as soon as
  its first event is in and what was already queued behind it has joined (no fixed timer).
- ``send_record``: a route handed straight to the aiokafka producer under Faust's (not through
  ``Topic.send``, which suspended the stage three times per record).
- ``write_through``: a write to a table of bytes (the completed table: the results) goes to
  the store and, as one record, straight to the aiokafka producer, not through Faust's
  changelog machinery; its persisted offset is written at most every 0.1 s.
- ``install_eager_delivery``: the fetcher hands a message to its streams at once when they
  have room (``Consumer.wait_first``), not through two tasks and two event-loop turns.
- ``install_unlogged_table_writes``: table writes skip RocksDB's write-ahead log (the
  changelog topic is the table's log); a store is flushed before Faust lets go of it.
- ``current_event``: the contextvar through which a table write finds its changelog partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from faust.streams import _current_event as current_event  # noqa: F401 - re-exported
from faust.transport.consumer import Consumer as FaustConsumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from mode.services import WaitResults

from app import eager
from app.coordinator_watch import CoordinatorWatch as _CoordinatorWatch
from app.coordinator_watch import metadata_state  # noqa: F401 - re-exported
from app.coordinator_watch import task_stacks as _task_stacks  # noqa: F401 - re-exported

logger = logging.getLogger(__name__)
TESTED_FAUST = "0.15"
IDEMPOTENT = {"acks": "all", "enable_idempotence": True}


def install_idempotent_producer() -> None:
    """Give every producer Faust builds Kafka's idempotent-producer settings.

    An idempotent producer numbers its batches per partition and the broker drops a batch it
    already appended, so a retry after a lost acknowledgement (the broker stopped, killed or
    paused mid-request) leaves one record, not two. Transactions are not used: this is only the
    producer half of exactly-once, which is all the results log needs.
    """
    producer_class = faust_aiokafka.Producer
    if getattr(producer_class, "_switchyard_idempotent", False):
        return
    extra = producer_class._settings_extra

    def settings_extra(self: Any) -> dict[str, Any]:
        return {**extra(self), **IDEMPOTENT}

    producer_class._settings_extra = settings_extra  # type: ignore[method-assign]
    producer_class._switchyard_idempotent = True  # type: ignore[attr-defined]


# How long a created topic may take to show in the broker's metadata before Faust goes on.
TOPIC_METADATA_WAIT_S = 15.0


def install_topic_creation_wait() -> None:
    """After Faust creates a topic, wait until the broker's metadata lists its partitions.

    With KRaft a CreateTopics answer comes before every broker serves the new topic's
    metadata. Faust creates the tables' changelog topics and subscribes to them at once: the
    group leader's assignor then found ``window_hopping-changelog`` missing ("Ignoring missing
    topic"), assigned none of its partitions, and the hopping window table stayed empty on that
    worker until the next rebalance (a CI failure of tests/integration/test_dashboard.py).
    The wait reads metadata into a fresh cluster view, so the client's own tracked topics are
    left as Faust set them.
    """
    transport = faust_aiokafka.Transport
    if getattr(transport, "_switchyard_waits_for_topics", False):
        return
    create = transport._create_topic

    known: set[str] = set()  # topics the broker's metadata has listed, with partitions

    async def create_and_wait(self: Any, owner: Any, client: Any, topic: str, partitions: int,
                              replication: int, **kwargs: Any) -> None:
        # A restarting worker declares ~25 topics that all exist: asking the broker to create
        # each (and then reading the whole cluster's metadata) took ~0.25 s apiece, 6 s of the
        # restart after a kill -9. One metadata read settles every topic that already exists.
        if topic in known:
            return
        if not known:
            with contextlib.suppress(Exception):
                metadata = await client.fetch_all_metadata()
                known.update(t for t in metadata.topics() if metadata.partitions_for_topic(t))
            if topic in known:
                return
        await create(self, owner, client, topic, partitions, replication, **kwargs)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TOPIC_METADATA_WAIT_S
        while True:
            with contextlib.suppress(Exception):
                metadata = await client.fetch_all_metadata()
                if metadata.partitions_for_topic(topic):
                    known.add(topic)
                    return
            if loop.time() > deadline:
                logger.warning("topic %s not in the broker's metadata %.0f s after its creation",
                               topic, TOPIC_METADATA_WAIT_S)
                return
            await asyncio.sleep(0.1)

    transport._create_topic = create_and_wait  # type: ignore[method-assign]
    transport._switchyard_waits_for_topics = True  # type: ignore[attr-defined]


def install_patient_partition_check() -> None:
    """Let a table write pass while the changelog topic's partitions are still unknown.

    Faust checks, on a table's first write per source topic, that the changelog has as many
    partitions as the source (``Collection._verify_source_topic_partitions``). On a fresh
    namespace the changelog was created a moment before and the consumer's metadata may still
    count 0 partitions for it: the check raised PartitionsMismatch and crashed the window agent
    at start-up (seen in tests/reliability/test_broker_faults.py). Zero means "not known yet",
    not a mismatch: the write goes to the event's partition as always, and the check runs
    again at the next write, until the metadata has the topic.
    """
    from faust.tables.base import Collection

    if getattr(Collection, "_switchyard_patient", False):
        return
    verify = Collection._verify_source_topic_partitions

    def verify_when_known(self: Any, source_topic: str) -> None:
        if (source_topic not in self._verified_source_topics_for_partitions
                and self.app.consumer.topic_partitions(self.changelog_topic_name) == 0):
            return
        verify(self, source_topic)

    Collection._verify_source_topic_partitions = verify_when_known  # type: ignore[method-assign]
    Collection._switchyard_patient = True  # type: ignore[attr-defined]


def install_static_member_leave() -> None:
    """Send the LeaveGroup of a static member too, when its consumer stops cleanly.

    With a ``group.instance.id`` aiokafka never leaves the group (KIP-345: the member is
    expected back), so a worker stopped for good held its partitions until its session timed
    out — 15 s with nothing decided or completed on them. Leaving by member id (LeaveGroup
    v0/v1, which the broker accepts for a static member) hands them over at once; a crashed
    worker sends nothing, and its restart reclaims the partitions by its instance id.
    Measured with plain consumers: the survivor held every partition 17.9 s after a static
    member's clean stop without this, 2.8 s with it.
    """
    from aiokafka.consumer import group_coordinator
    from aiokafka.errors import KafkaError
    from aiokafka.protocol.group import LeaveGroupRequest

    coordinator = group_coordinator.GroupCoordinator
    if getattr(coordinator, "_switchyard_static_leave", False):
        return
    original = coordinator._maybe_leave_group

    async def maybe_leave_group(self: Any) -> None:
        if self._group_instance_id is None or self.generation <= 0:
            await original(self)
            return
        try:
            await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
        except KafkaError as exc:
            group_coordinator.log.error("LeaveGroup request failed: %s", exc)
        else:
            group_coordinator.log.info("LeaveGroup request succeeded (static member %s)",
                                       self._group_instance_id)
        self.reset_generation()

    coordinator._maybe_leave_group = maybe_leave_group
    coordinator._switchyard_static_leave = True


def install_draining_flush() -> None:
    """Make Faust's pre-commit flush wait until every buffered table write is handed over.

    ``ProducerBuffer.flush`` gives up when one message takes over 0.1 s and ignores the message
    being handed over, so an offset can be committed while its changelog write (for the
    ``completed`` table: the result itself) is still in memory; ``kill -9`` then loses it.
    Pinned by tests/reliability/test_commit_durability.py.

    Each write is handed over by ``hand_over`` (not Faust's ``Topic.publish_message``), so
    the buffer drains in one turn of the event loop instead of one write a turn.
    """
    if getattr(ProducerBuffer, "_switchyard_draining", False):
        return
    async def send_pending(self: Any, fut: Any) -> None:
        self._in_hand = getattr(self, "_in_hand", 0) + 1
        try:
            await hand_over(self.app, fut)
        finally:
            self._in_hand -= 1

    async def flush(self: Any) -> None:
        while self.size or getattr(self, "_in_hand", 0):
            if self.state != "running":
                raise RuntimeError("Cannot flush: Producer not Running")
            self.message_sent.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.message_sent.wait(), timeout=0.1)

    ProducerBuffer._send_pending = send_pending  # type: ignore[method-assign]
    ProducerBuffer.flush = flush  # type: ignore[method-assign]
    ProducerBuffer._switchyard_draining = True  # type: ignore[attr-defined]


# Table writes waiting in Faust's producer buffer before the consumer stops handing records to
# the streams. Faust's 100 is a few batches' worth here: past it the conductor flushed the
# buffer message by message before every record it delivered ("producer buffer full" logged
# ~150 times a minute at 300 workloads/s), and the decide stage waited on that.
PRODUCER_BUFFER_MESSAGES = 10_000


def install_larger_producer_buffer() -> None:
    """Let Faust's producer buffer hold PRODUCER_BUFFER_MESSAGES table writes."""
    ProducerBuffer.max_messages = PRODUCER_BUFFER_MESSAGES


async def seeking_first(consumer: Any, body: Callable[[], Awaitable[None]]) -> None:
    """Run ``body`` with ``consumer.resume_partitions`` held back until ``perform_seek`` has
    landed (or until ``body`` ends, when it seeks nothing)."""
    resume, seek = consumer.resume_partitions, consumer.perform_seek
    deferred: list[Any] = []

    def resume_after_seek(tps: Any) -> None:
        deferred.extend(tps)

    async def seek_then_resume() -> None:
        try:
            await seek()
        finally:
            resume(list(deferred))
            deferred.clear()

    consumer.resume_partitions = resume_after_seek
    consumer.perform_seek = seek_then_resume
    try:
        await body()
    finally:
        del consumer.resume_partitions, consumer.perform_seek  # the class's methods again
        if deferred:
            resume(list(deferred))


def install_seek_before_resume() -> None:
    """Seek the stream partitions to their committed offsets before they are fetched again.

    ``Recovery.on_recovery_completed`` resumes the stream partitions and only then awaits
    ``Consumer.perform_seek``. The fetcher runs in between. Logged after a ``kill -9`` (every
    fetch, and every batch decide got): the fetcher read each workload partition from the
    committed offset to its end and handed it over; decide got the first one or two records of
    each; the seek landed and the same ranges were fetched again (and dropped as already read:
    the read offsets are reset only after the seek); decide then got one more record, and
    never the rest. The driver stood at the end, so nothing fetched them again. The offset
    guard (app/gaps.py) sees such a hole only when a later record arrives: a re-read of ~66
    records per partition in the long worker-crash run, and at the end of a trace never: the
    bounded worker-crash test stalled with workloads undecided in 5 runs of 10 on this machine.
    With the resumption held until the seek has landed, the first fetch starts at the
    committed offsets: 0 of 6 runs failed, 0 records re-read.
    """
    from faust.tables.recovery import Recovery

    if getattr(Recovery, "_switchyard_seek_first", False):
        return
    original = Recovery.on_recovery_completed

    async def on_recovery_completed(self: Any, generation_id: int = 0) -> None:
        await seeking_first(self.app.consumer, lambda: original(self, generation_id))

    on_recovery_completed.__wrapped_original__ = original  # type: ignore[attr-defined]
    Recovery.on_recovery_completed = on_recovery_completed  # type: ignore[method-assign]
    Recovery._switchyard_seek_first = True  # type: ignore[attr-defined]


async def seek_to_committed_or_start(consumer: Any, keep_topics: set[str]) -> dict[Any, Any]:
    """aiokafka's ``seek_to_committed``, and a partition with nothing committed (or 0) goes
    back to its start too, except those of ``keep_topics``; the committed offsets.

    aiokafka seeks only partitions whose committed offset is above 0 and leaves the others
    wherever the fetcher got to. Faust relies on this seek to undo what a rebalance
    interrupted: a fetch made before a rebalance returns after it (aiokafka waits out the
    reassignment inside ``fetched_records``), with the records of partitions the worker still
    owns, and Faust drops them while the flow is stopped (``Consumer.getmany``,
    ``Service.wait_first``). On a partition nobody had committed yet, the position stayed past
    them: logged in tests/integration/test_shared_backlog.py (about one run in 25), the first
    worker's two workload partitions stood at offsets 8 and 5, none of them delivered, its
    decide stage never ran, and the 13 workloads waited forever. ``seek(tp, 0)`` below the log
    start is reset to the earliest offset by the consumer's reset policy (``earliest``)."""
    committed = dict(await consumer.seek_to_committed())
    for tp, offset in committed.items():
        if not offset and tp.topic not in keep_topics:
            consumer.seek(tp, 0)
    return committed


def install_uncommitted_seek_to_start() -> None:
    """Faust's ``perform_seek`` (at the end of every recovery, and when a fetch comes back
    while the flow is stopped) also rewinds the stream partitions that have no committed
    offset (``seek_to_committed_or_start``); table changelogs keep the positions the recovery
    gave them. Only with ``consumer_auto_offset_reset="earliest"`` (app/main.py): with
    ``latest`` an uncommitted partition's place is its end, which aiokafka keeps anyway."""
    thread_class = faust_aiokafka.AIOKafkaConsumerThread
    if getattr(thread_class.seek_to_committed, "_switchyard", False):
        return

    async def seek_to_committed(self: Any) -> Any:
        if self.app.conf.consumer_auto_offset_reset != "earliest":
            return await self.call_thread(self._ensure_consumer().seek_to_committed)
        keep = set(self.app.tables.changelog_topics)
        return await self.call_thread(seek_to_committed_or_start, self._ensure_consumer(), keep)

    seek_to_committed._switchyard = True  # type: ignore[attr-defined]
    thread_class.seek_to_committed = seek_to_committed  # type: ignore[method-assign]


async def send_record(app: Any, topic: str, key: bytes | None, value: bytes,
                      partition: int | None = None, *, timestamp_ms: int | None = None,
                      headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[Any]:
    """Hand one record to the aiokafka producer under Faust's own and return its delivery
    future (not awaited: the caller checks it later).

    Faust's ``Topic.send`` wraps each record in a future message with its sensors and
    callbacks, and suspended the decide stage about three times per route (600 turns of the
    event loop in a decide batch of 200), so aiokafka's sender went out between them with a
    request of a route or two, and the executors fetched routes a few at a time; sent here,
    a batch of 200 routes goes in a few turns (worker capacity: ~440 instead of ~1,100 µs of
    worker CPU per workload; BENCHMARKS.md, pipeline). It is the same producer, so Faust's
    pre-commit flush (``Producer.flush``: its buffer, then ``AIOKafkaProducer.flush``) still
    waits for these records before any offset is committed, and they are idempotent like the
    rest (``install_idempotent_producer``). Uses ``Producer.maybe_start`` and
    ``Producer._ensure_producer`` (faust-streaming 0.15).
    """
    producer = app.producer
    await producer.maybe_start()
    aiokafka_producer = producer._ensure_producer()
    delivery: asyncio.Future[Any] = await aiokafka_producer.send(
        topic, value, key=key, partition=partition, timestamp_ms=timestamp_ms, headers=headers)
    return delivery


# How often `write_through` writes a table partition's persisted changelog offset to its store.
PERSIST_INTERVAL_S = 0.1
_persisted_at: dict[tuple[int, int], float] = {}
_clock = time.monotonic


async def write_through(app: Any, table: Any, key: bytes, value: bytes) -> asyncio.Future[Any]:
    """``table[key] = value`` for a table of raw bytes (key and value types ``bytes``): the
    value into the local store and its changelog record straight to the aiokafka producer
    (`send_record`), on the changelog partition Faust would pick (the current event's,
    ``Table.partition_for_key``, with its partition check). Returns the record's delivery.

    Faust's path (``Table.on_key_set`` → ``send_changelog`` → ``Topic.send_soon``: a future
    message, the producer buffer, `hand_over`, ``Topic._on_published`` and a RocksDB write
    of the persisted offset on every acknowledgement) was ~13 % of a busy worker's samples
    under py-spy for the completed table's one write per workload (its result); measured
    A/B, the worker's CPU per workload fell ~3 % (267 → 259 µs). The same
    producer, so Faust's pre-commit flush still waits for the record before any offset is
    committed. The store's persisted offset — where a recovery of this partition starts
    reading the changelog — is written at most every PERSIST_INTERVAL_S per partition, the
    newest acknowledged offset: a store behind its persisted offset would lose records, one
    ahead of it only re-reads some (re-applying a changelog record writes the same value), so
    the lag is safe; after a crash the stores are rebuilt from the changelogs anyway
    (``app.main.discard_state_after_crash``). Uses ``Table.partition_for_key``,
    ``Table.data`` (the serialised store), ``Table.changelog_topic`` and
    ``Store.set_persisted_offset`` (faust-streaming 0.15)."""
    partition = table.partition_for_key(key)
    table.data[key] = value
    delivery = await send_record(app, table.changelog_topic.get_topic_name(), key, value,
                                 partition)
    delivery.add_done_callback(functools.partial(_persist_offset, table.data))
    return delivery


def _persist_offset(store: Any, delivery: asyncio.Future[Any]) -> None:
    if delivery.cancelled() or delivery.exception() is not None:
        return  # the writer's own check of its deliveries reports it
    metadata = delivery.result()
    slot = (id(store), metadata.partition)
    now = _clock()
    if now - _persisted_at.get(slot, -PERSIST_INTERVAL_S) >= PERSIST_INTERVAL_S:
        _persisted_at[slot] = now
        store.set_persisted_offset(metadata.topic_partition, metadata.offset)


async def hand_over(app: Any, fut: Any) -> None:
    """Hand one buffered Faust message (a table's changelog write: ``FutureMessage``) to the
    aiokafka producer, as ``Topic.publish_message`` does without waiting, but in one step.

    Faust's path (``Topic.publish_message`` → ``Producer.send``) suspended the buffer's
    drain task between messages, so the buffer let out about one write per turn of the event
    loop; on a busy worker the completed table's writes (the results) queued there for
    seconds. Here the buffer drains in one turn. When the broker acknowledges the record, the
    message's future, its callback (the store's persisted offset) and the sensors are settled
    by Faust's own ``Topic._on_published``. Uses ``Topic._on_published`` and
    ``PendingMessage``'s fields (faust-streaming 0.15)."""
    message = fut.message
    channel = message.channel
    topic = channel.get_topic_name()
    producer = app.producer
    state = app.sensors.on_send_initiated(
        producer, topic, message=message, keysize=len(message.key or b""),
        valsize=len(message.value or b""))
    timestamp = message.timestamp
    headers = message.headers
    if isinstance(headers, Mapping):
        headers = list(headers.items())
    delivery = await send_record(
        app, topic, message.key, message.value, message.partition,
        timestamp_ms=int(timestamp * 1000.0) if timestamp else None, headers=headers or None)
    delivery.add_done_callback(functools.partial(channel._on_published, message=fut,  # noqa: SLF001
                                                 state=state, producer=producer))


# A batch that has its first event lets the event loop run, pass after pass, so that what was
# already fetched behind it joins (Faust's fetcher hands the stream one record per await, so
# a pass adds about one event), until it is full or IDLE_PASSES passes in a row added
# nothing. Stopping at the first empty pass (and after at most 64 passes) left the stage in
# one of two steady states on the same burst: batches of ~3 workloads at ~510 workloads/s, or
# of ~50 at ~740/s, depending on how the first ones happened to go (BENCHMARKS.md, pipeline).
IDLE_PASSES = 4


async def take_batches(stream: Any, max_events: int, linger_s: float = 0.0,
                       ) -> AsyncIterator[list[Any]]:
    """Batches of a Faust stream's events for ``async for`` in an agent.

    Faust's ``Stream.take_events(max_, within)`` hands a batch over only when it is full or
    when its ``within`` timer fires, so at low load every event waits for the timer (5 ms in
    decide and again in complete: half the round trip's fixed cost at 25 workloads/s), and an
    idle stage wakes every ``within``. Here the first event wakes the stage, the loop runs
    passes so that records already fetched behind it join the batch (under load batches are
    as large as what is queued, up to ``max_events``; idle, the batch goes after IDLE_PASSES
    empty passes, microseconds), and then the batch goes; ``linger_s`` > 0 additionally
    waits that long for a batch to fill. Nothing else differs from ``take_events``, on
    purpose (an earlier helper that kept draining while the agent worked, and acked after the
    ``yield`` rather than in ``finally``, stalled a rebalance test in CI):

    - while the agent works on a batch, the stream's processor waits (a future), so no event
      is read past the batch, and it waits on the service when the buffer is full, so a
      stopping stream is never stuck in it;
    - the batch's events are acknowledged in ``finally``, after the agent is done with them
      (or leaves the loop), in order: an offset is committed only after its event was
      processed.

    Uses Faust's ``Stream.add_processor``, ``_enable_passive``, ``enable_acks``, ``ack``,
    ``wait``, ``wait_for_stopped`` and ``_processors`` (faust-streaming 0.15).
    """
    events: list[Any] = []
    arrived = asyncio.Event()  # the buffer holds at least one event
    full = asyncio.Event()
    taken = asyncio.Event()  # the full buffer was handed over: adding may go on
    consuming: asyncio.Future[None] | None = None
    loop = asyncio.get_running_loop()

    async def add_to_buffer(value: Any) -> Any:
        nonlocal consuming
        if consuming is not None:  # the agent is at work on the last batch: wait for it
            try:
                await consuming
            finally:
                consuming = None
        event = stream.current_event
        if event is None:
            raise RuntimeError("a buffered stream value has no current event")
        events.append(event)
        arrived.set()
        if len(events) >= max_events:
            full.set()
            taken.clear()
            await stream.wait(taken)  # never more than max_events in a batch
        return value

    enable_acks = stream.enable_acks
    stream.enable_acks = False  # acknowledged here, after the agent is done with the batch
    stream.add_processor(add_to_buffer)
    stream._enable_passive(aiter(stream.channel))  # noqa: SLF001 - Faust's own take path
    try:
        while not stream.should_stop:
            await stream.wait_for_stopped(arrived)
            if linger_s > 0 and not full.is_set():
                await stream.wait_for_stopped(full, timeout=linger_s)
            idle = 0
            while idle < IDLE_PASSES and not full.is_set():
                before = len(events)
                await asyncio.sleep(0)
                idle = idle + 1 if len(events) == before else 0
            if not events:
                continue
            working: asyncio.Future[None] = loop.create_future()
            consuming = working
            try:
                yield list(events)
            finally:
                batch = list(events)
                events.clear()
                for event in batch:
                    await stream.ack(event)
                arrived.clear()
                if not working.done():
                    working.set_result(None)
                full.clear()
                taken.set()
    finally:
        stream.enable_acks = enable_acks
        stream._processors.remove(add_to_buffer)  # noqa: SLF001


def install_eager_delivery() -> None:
    """Faust's fetcher delivers each message as ``await self.wait_first(callback(message),
    self.suspend_flow.wait())`` (``Consumer._drain_messages``): a task for each, and the
    fetcher's next message only after two turns of the event loop. Every other task (the
    stages, the producer, the timers) runs in each turn, so on a busy worker messages reached
    the streams a few per turn and waited in the fetcher while the stages' batches stayed
    small: at 250 workloads/s on the 2-core machine, outcomes waited ~3 s between their
    record and their stage.

    Here the callback's first step runs at once. When it finishes there (the streams' queues
    had room, flow was not suspended: the usual case) the message is delivered and no task is
    made; the suspend-flow wait, never started, is closed. When it has to wait (a full
    queue, suspended flow), Faust's ``wait_first`` takes the rest of it, as before, so a
    rebalance still interrupts a blocked delivery."""
    if getattr(FaustConsumer.wait_first, "_switchyard", False):
        return
    original = FaustConsumer.wait_first

    async def wait_first(self: Any, *coros: Any, timeout: Any = None) -> WaitResults:
        first = coros[0] if coros else None
        if (not asyncio.iscoroutine(first) or self._stopped.is_set()  # noqa: SLF001
                or self._crashed.is_set()):  # noqa: SLF001
            return await original(self, *coros, timeout=timeout)
        finished, value = eager.start(first)
        if not finished:
            return await original(self, value, *coros[1:], timeout=timeout)
        for other in coros[1:]:
            if asyncio.iscoroutine(other):
                other.close()
        return WaitResults([first], [value], False)

    wait_first._switchyard = True  # type: ignore[attr-defined]
    FaustConsumer.wait_first = wait_first  # type: ignore[method-assign]


def install_unlogged_table_writes() -> None:
    """Write the tables' RocksDB stores without RocksDB's write-ahead log, and flush each store
    before Faust drops it (``Store.stop``, ``Store.revoke_partitions``).

    A table's log is its changelog topic: a store is a cache of it that Faust restores from
    the changelog offset persisted *in the same store* (``Store.set_persisted_offset``).
    Without the WAL, writes not yet flushed from the memtable are lost with the process, the
    persisted offset with them, so the store comes back at an earlier offset and recovery
    replays the changelog from there: nothing the changelog holds is lost. (A worker that
    crashed drops its stores anyway: app/main.py::discard_state_after_crash.) Faust never
    closes a store (``db.close()`` is commented out in faust-streaming 0.15) and rocksdict
    asks for a flush before the program stops, hence the flush. The WAL write was ~3 µs of
    each put and, in the worker, 7 % of its CPU per workload (bench/hotpath.py, four pairs).
    Batches written by recovery (``Rdict.write``) keep the default options.
    """
    from faust.stores import rocksdb as faust_rocksdb

    options_class, store_class = faust_rocksdb.RocksDBOptions, faust_rocksdb.Store
    if getattr(options_class, "_switchyard_unlogged", False):
        return
    open_db, stop, revoke = options_class.open, store_class.stop, store_class.revoke_partitions

    def open_unlogged(self: Any, path: Any, *, read_only: bool = False) -> Any:
        db = open_db(self, path, read_only=read_only)
        if self.use_rocksdict and not read_only:
            write_options = faust_rocksdb.rocksdict.WriteOptions()
            if callable(write_options.disable_wal):  # a setter method in older rocksdicts
                write_options.disable_wal(True)
            else:  # a property in 0.3.29, the version tested
                write_options.disable_wal = True
            db.set_write_options(write_options)
        return db

    def flush(dbs: Any) -> None:
        for db in list(dbs):
            with contextlib.suppress(AttributeError):
                db.flush(True)

    async def stop_flushed(self: Any) -> None:
        flush(self._dbs.values())
        await stop(self)

    def revoke_flushed(self: Any, table: Any, tps: Any) -> None:
        flush(self._dbs[tp.partition] for tp in tps
              if tp.topic in table.changelog_topic.topics and tp.partition in self._dbs)
        revoke(self, table, tps)

    options_class.open = open_unlogged  # type: ignore[method-assign]
    store_class.stop = stop_flushed  # type: ignore[method-assign]
    store_class.revoke_partitions = revoke_flushed  # type: ignore[method-assign]
    options_class._switchyard_unlogged = True  # type: ignore[attr-defined]


def install() -> None:
    """Every patch (idempotent, so importing twice is harmless)."""
    install_eager_delivery()
    install_idempotent_producer()
    install_topic_creation_wait()
    install_patient_partition_check()
    install_static_member_leave()
    install_draining_flush()
    install_larger_producer_buffer()
    install_seek_before_resume()
    install_uncommitted_seek_to_start()
    install_unlogged_table_writes()


def aiokafka_consumer(app: Any) -> Any | None:
    """The aiokafka consumer inside Faust's consumer thread (``Consumer._thread._consumer``),
    or None before it exists."""
    thread = getattr(app.consumer, "_thread", None)
    return getattr(thread, "_consumer", None)


class CoordinatorWatch(_CoordinatorWatch):
    """``app.coordinator_watch.CoordinatorWatch`` on the worker's consumer, which lives in
    Faust's consumer thread: the report and the wake-up are scheduled into that thread."""

    def check(self, app: Any, now: float) -> bool:
        """True when the coordinator has been unknown longer than ``after_s`` (and a report
        and a wake-up were scheduled into the consumer's thread)."""
        consumer = aiokafka_consumer(app)
        if not self.due(consumer, now):
            return False
        thread_loop = app.consumer._thread.thread_loop
        thread_loop.call_soon_threadsafe(self.report_and_wake, consumer, thread_loop)
        return True
