"""The executor process: one runtime on one device, fed by its class's route topic (or several
runtimes on one device, an ``Executor`` each sharing one compute thread: app/executor_main.py).

Plain aiokafka rather than Faust: the executor has no tables, and it must commit an offset
only after the workload's outcome and metric are acknowledged (at-least-once; the worker
deduplicates outcomes by workload id). Compute runs in one worker thread, never on the event
loop, so consumer heartbeats keep flowing while a long op runs.

Routes are fetched in batches of up to ``executor_fetch_records`` and run back to back in the
compute thread, which does not wait for the event loop between them; the loop publishes each
result as it finishes, without waiting for the acks, so the next op runs while they travel:
the outcomes of one workload partition finished back to back go as one record (the
outcomes topic's batch form), published when the routes in hand are all run, when the first is
``executor_outcome_linger_ms`` old, or at ``executor_outcome_batch_rows``. With dynamic batching (``executor_batching``, on by default) the fetched routes of one
op spec and variant that the runtime batches run as one batched call of up to
``executor_max_batch`` (runtimes/work.py), each still with its own outcome and metric; the
executor waits ``executor_batch_wait_ms`` (0 by default) for more routes before running what it
holds. Batches run routes out of fetch order, so a partition is committed only up to its first
route not yet run. Metrics are gathered and published as one record of many rows (the metrics topic's
columnar batch form, version 3) every ``executor_metric_linger_ms`` or ``executor_metric_batch_rows`` rows, and
before every commit. The batch's offsets are committed once every record published for it is
acknowledged (at the end of the batch, or sooner when a batch of slow ops has run for
``COMMIT_EVERY_S``), in the background while the next batch runs, one commit pending at most.
SIGTERM/SIGINT finish the op in hand, publish its records, commit up to it — the fetched
routes not yet run stay uncommitted, for another instance — send a last ``stopping``
heartbeat and leave the group.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from app import topics
from app.admin import contract_topics, ensure_topics
from app.coordinator_watch import CoordinatorWatch
from app.executor_plan import Plan, committable, limits_from
from app.handoff import Handoff
from app.producing import RenewingProducer
from app.records import (
    DeadLetterRecord,
    HeartbeatRecord,
    MetricRecord,
    ResultRecord,
    metric_columns_bytes,
    outcome_batch_bytes,
    wire_bytes,
)
from app.settings import Settings
from models.ops import SpecError
from models.transfer import Link
from models.workload import decode_json_bounded
from runtimes import Runtime
from runtimes.calibrate import calibrate, calibrate_kernels, calibrate_setup, calibrates
from runtimes.energy import NvmlMeter, PowerTracker
from runtimes.work import (
    Parsed,
    WorkResult,
    now_ms,
    parse_route,
    parsed_batch_key,
    perform,
    perform_batch,
    read_slowdown,
    route_id,
)
from runtimes.work import plan as plan_batches

logger = logging.getLogger(__name__)
# How long a stopping executor keeps trying to publish the outcome in hand.
STOP_RETRY_S = 30.0
# Room for the record around an inline output as large as the inline limit allows.
ENVELOPE_BYTES = 64 * 1024
# Within a long batch, commit what is acknowledged at least this often (bounds redone work).
COMMIT_EVERY_S = 1.0
# How long the consumer's group coordinator may stay unknown before the executor reports where
# the consumer is and wakes its metadata synchronizer (app/coordinator_watch.py): 2x aiokafka's
# default session timeout, as the worker's watch uses 2x its own.
COORDINATOR_WATCH_S = 20.0
# A commit that has neither succeeded nor failed after this long is given up (the record will
# be redone): aiokafka's commit waits for the group coordinator without a bound of its own.
COMMIT_TIMEOUT_S = 30.0
# A metric batch stays well under the broker's default record size limit (1 MB).
METRIC_BATCH_MAX_BYTES = 512 * 1024
# Heartbeats name the host: with the pinned cores, it tells the router which executors share
# a core (models/dispatch.py::colocated).
HOST = socket.gethostname()[:255]


def default_device_id(runtime: Runtime) -> str:
    """``host-runtime-device-pid``, topic-key safe."""
    device = runtime.device.replace(":", "")
    return f"{HOST}-{runtime.name}-{device}-{os.getpid()}"


async def commit_or_give_up(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int,
                            timeout_s: float | None = None) -> bool:
    """Commit ``offset`` of ``tp``; False, logged, when the commit failed or did not finish
    within ``timeout_s`` (``COMMIT_TIMEOUT_S``): the record will be redone by whoever holds the
    partition next, and the worker drops the duplicate outcome. Partition revoked mid-op is
    the usual failure. The bound: aiokafka's commit first waits for the group coordinator,
    for ever if its coordination never recovers (in a CI run of the broker-kill scenario one
    executor's consumer logged its coordinator dead as the broker went and never found it
    again; that executor ran nothing more and never stopped cleanly — whether this wait held
    it is not confirmed). Given up, the executor goes on fetching and running its routes."""
    limit = COMMIT_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        async with asyncio.timeout(limit):
            await consumer.commit({tp: offset})
        return True
    except (CommitFailedError, KafkaError) as exc:
        logger.warning("commit of %s@%d failed (%s); the record will be redone", tp, offset, exc)
    except TimeoutError:
        logger.error("commit of %s@%d did not finish within %.0f s (the consumer's group "
                     "coordination may be stuck); the record will be redone", tp, offset, limit)
    return False


class Executor:
    """Consumes ``switchyard.routes.<class>``, runs each workload, reports what happened."""

    def __init__(
        self,
        settings: Settings,
        runtime: Runtime,
        device_id: str | None = None,
        slowdown_file: str | None = None,
        threads: int | None = None,
        cpus: tuple[int, ...] | None = None,
        link: Link | None = None,
        price_per_hour: float | None = None,
        queue: tuple[ThreadPoolExecutor, str] | None = None,
    ) -> None:
        """``queue``: a compute thread shared with the other executors of this process and
        the group's name (``--runtime a,b``): their executions run one at a time, in the order
        they were handed over, and every heartbeat names the group so the router counts them
        as one queue."""
        self.settings = settings
        # A remote class: the link this executor sits behind, and its price per device-hour.
        self.link = link
        self.price_per_hour = price_per_hour
        self.runtime = runtime
        self.device_id = device_id or default_device_id(runtime)
        self.slowdown_file = slowdown_file
        self.threads = threads
        self.cpus = list(cpus) if cpus else None
        self.limits = limits_from(settings)
        self.topics = settings.topic_names
        self.route_topic = self.topics.route(runtime.device_class)
        # Namespaced like the topics, so isolated deployments sharing a cluster never share a group.
        self.group_id = self.topics.executor_group(runtime.device_class)
        self.capabilities = [list(c) for c in runtime.capabilities()]
        # Measured matmul rates per precision, reference kernels' ms and a new shape's setup
        # beyond one execution per mode (runtimes/calibrate.py), once `run` starts.
        self.calibration: dict[str, float] | None = None
        self.kernel_ms: dict[str, dict[str, float]] | None = None
        self.setup_excess_ms: dict[str, float] | None = None
        self.started_at_ms = now_ms()
        self.stopping = asyncio.Event()
        self._committing: asyncio.Task[None] | None = None  # the background commit
        self.in_hand = 0
        self.processed = 0
        self.queue_group = queue[1] if queue else None
        self._owns_compute = queue is None
        self.compute = (queue[0] if queue else
                        ThreadPoolExecutor(max_workers=1, thread_name_prefix="compute"))
        nvml = getattr(runtime, "power_meter", lambda: None)()
        self.nvml: NvmlMeter | None = nvml if nvml is not None and nvml.available else None
        self.power = PowerTracker(self.nvml or runtime.meter)
        self._partitions: dict[str, int] = {}
        # Encoded metric rows not yet published, and when the first of them was added.
        self._metric_rows: list[bytes] = []
        self._metric_bytes = 0
        self._metric_since = 0.0
        # Encoded outcomes not yet published, per outcomes partition (their workloads'), with
        # their ids; the timer that publishes them once the first is old enough; the tasks
        # publishing what that timer sent (awaited before the next commit).
        self._outcomes: dict[int, list[tuple[str, bytes]]] = {}
        self._outcome_partitions = 0
        self._outcome_timer: asyncio.TimerHandle | None = None
        self._sending: list[asyncio.Task[None]] = []

    # --- Kafka plumbing -------------------------------------------------------------------
    def _client_kwargs(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.settings.broker, **self.settings.kafka_client_kwargs()}

    async def _class_partition(self, producer: RenewingProducer, topic: str) -> int:
        """All records of one device class go to one partition of ``topic``."""
        if topic not in self._partitions:
            count = len(await producer.partitions_for(topic))
            self._partitions[topic] = topics.class_partition(self.runtime.device_class, count)
        return self._partitions[topic]

    async def _send(
        self,
        producer: RenewingProducer,
        topic: str,
        key: str,
        value: bytes,
        partition: int | None = None,
    ) -> None:
        """Publish one record, retrying through a broker outage.

        An outcome must be published before its route is committed, so giving up would only
        make the workload run again; while stopping, it gives up after STOP_RETRY_S (the route
        stays uncommitted and another instance redoes it).
        """
        delay, gave_up_at = 0.25, None
        while True:
            try:
                await producer.send_and_wait(topic, value, key=key.encode(), partition=partition)
                return
            except KafkaError as exc:
                if self.stopping.is_set():
                    gave_up_at = gave_up_at or asyncio.get_running_loop().time() + STOP_RETRY_S
                    if asyncio.get_running_loop().time() > gave_up_at:
                        raise
                logger.warning("publishing to %s failed (%s); retrying in %.2f s",
                               topic, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def run(self, handle_signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (``handle_signals``) or until ``stopping`` is set;
        returns the process exit code."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stopping.set)
        await ensure_topics(
            self.settings,
            {**contract_topics(self.settings), self.route_topic: self.settings.route_partitions},
        )
        max_bytes = self.settings.max_message_bytes + ENVELOPE_BYTES
        # Idempotent, and replaced after a failed send (app/producing.py): a retried outcome or
        # metric is appended once, and a broker fault cannot wedge the producer.
        producer = RenewingProducer(lambda: AIOKafkaProducer(
            acks="all", enable_idempotence=True, max_request_size=max_bytes,
            request_timeout_ms=int(self.settings.executor_request_timeout_s * 1000),
            **self._client_kwargs()))
        consumer = AIOKafkaConsumer(
            self.route_topic,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_bytes,
            fetch_max_bytes=max(max_bytes, 52_428_800),
            **self._client_kwargs(),
        )
        if self.settings.executor_calibrate and calibrates(self.runtime):
            # Before the first heartbeat, in the thread that runs the work (its threads and
            # cores): the class's cold prior is built from what the first heartbeats say.
            began = time.perf_counter()
            self.calibration = await loop.run_in_executor(self.compute, calibrate, self.runtime)
            setups: list[float] = []
            self.kernel_ms = await loop.run_in_executor(
                self.compute, functools.partial(calibrate_kernels, self.runtime, setups=setups))
            self.setup_excess_ms = await loop.run_in_executor(self.compute, calibrate_setup,
                                                              self.runtime, setups)
            logger.info("calibrated %s in %.1f s: matmul GFLOP/s %s, %d reference kernels, "
                        "setup of a new shape beyond one run (ms) %s", self.runtime.device_class,
                        time.perf_counter() - began, self.calibration,
                        sum(len(v) for v in (self.kernel_ms or {}).values()),
                        self.setup_excess_ms)
        await producer.start()
        await consumer.start()
        heartbeats = asyncio.create_task(self._heartbeat_loop(producer, consumer))
        logger.info(
            "executor %s (%s) consuming %s as %s",
            self.device_id,
            self.runtime.device_class,
            self.route_topic,
            self.group_id,
        )
        try:
            try:
                await self._consume(producer, consumer)
            finally:
                await self.commit_pending()  # what ran is committed before the group is left
        finally:
            heartbeats.cancel()
            try:
                await self._heartbeat(producer, consumer, state="stopping")
            except Exception as exc:  # the broker may be the reason we are stopping
                logger.warning("last heartbeat not sent: %s", exc)
            await consumer.stop()  # leaves the group: partitions move at once
            await producer.stop()
            if self._owns_compute:  # a shared one is shut down by the process
                self.compute.shutdown(wait=True)
            self.runtime.close()
        logger.info("executor %s stopped after %d workloads", self.device_id, self.processed)
        return 0

    async def _consume(self, producer: RenewingProducer, consumer: AIOKafkaConsumer) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            stop = asyncio.ensure_future(self.stopping.wait())
            fetch = asyncio.ensure_future(consumer.getmany(
                timeout_ms=500, max_records=self.settings.executor_fetch_records))
            await asyncio.wait({stop, fetch}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not fetch.done():
                fetch.cancel()
                break
            try:
                fetched = fetch.result()
            except KafkaError as exc:  # e.g. the broker restarting: wait and fetch again
                logger.warning("fetching routes failed (%s); retrying", exc)
                await asyncio.sleep(1.0)
                continue
            batch = [(tp, message) for tp, messages in fetched.items() for message in messages]
            if batch and self.settings.executor_batching and self.settings.executor_batch_wait_ms:
                batch += await self._fetch_more(consumer, len(batch))
            if not batch:
                continue
            # The fetched routes not yet run count as queued in the heartbeat (the consumer's
            # position is already past them).
            self.in_hand = len(batch)
            published: list[asyncio.Task[None]] = []
            ran: set[int] = set()
            last_commit = loop.time()
            async for group, tasks in self._run_plan(producer, batch):
                published.extend(tasks)
                ran.update(group)
                self.in_hand = len(batch) - len(ran)
                if loop.time() - last_commit > COMMIT_EVERY_S:
                    await self._commit_behind(producer, consumer, published,
                                              committable(batch, ran))
                    published, last_commit = [], loop.time()
            self.in_hand = 0
            # The next batch is fetched and run while this one's records are acknowledged.
            await self._commit_behind(producer, consumer, published, committable(batch, ran))

    async def _fetch_more(self, consumer: AIOKafkaConsumer, have: int) -> list[tuple[Any, Any]]:
        """Routes that arrive within ``executor_batch_wait_ms`` of the first, up to
        ``executor_fetch_records`` in all: a larger batch at the price of that wait."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.executor_batch_wait_ms / 1000.0
        more: list[tuple[Any, Any]] = []
        while (left := deadline - loop.time()) > 0 and not self.stopping.is_set():
            room = self.settings.executor_fetch_records - have - len(more)
            if room <= 0:
                break
            try:
                fetched = await consumer.getmany(timeout_ms=max(1, int(left * 1000)),
                                                 max_records=room)
            except KafkaError as exc:
                logger.warning("fetching more routes failed (%s)", exc)
                break
            more += [(tp, message) for tp, messages in fetched.items() for message in messages]
        return more

    def _plan(self, batch: list[tuple[Any, Any]]) -> Plan:
        """Decode the fetched routes and group the ones that can share a batched call (in the
        compute thread: decoding inline tensors is CPU work)."""
        routes: list[dict[str, Any] | str] = []
        keys: list[Any] = []
        parsed: dict[int, Parsed] = {}
        for index, (_, message) in enumerate(batch):
            try:
                route = decode_json_bounded(
                    message.value or b"", self.limits.max_message_bytes, self.limits.max_depth
                )
                route_id(route)
            except SpecError as exc:
                routes.append(str(exc))  # dead-lettered when its turn comes
                keys.append(None)
                continue
            assert isinstance(route, dict)
            routes.append(route)
            # Parsed once here: perform() and perform_batch() take it as it is.
            one = parse_route(route, self.limits)
            if one is not None:
                parsed[index] = one
            # Behind a link each workload's bytes are waited for alone: no batching.
            keys.append(parsed_batch_key(one, self.runtime)
                        if one is not None and self.settings.executor_batching
                        and self.link is None else None)
        groups = plan_batches(keys, self.settings.executor_max_batch)
        return Plan([message for _, message in batch], routes, parsed, groups)

    async def _commit_behind(self, producer: RenewingProducer, consumer: AIOKafkaConsumer,
                             published: list[asyncio.Task[None]],
                             offsets: dict[TopicPartition, int]) -> None:
        """Publish every record held for ``offsets`` now (outcomes and metrics gathered for
        them), and commit ``offsets`` in the background once all of them are acknowledged, so
        that the device runs the next routes meanwhile. At most one such commit is pending:
        the previous one is waited for first (commits stay in order, and a broker outage stops
        the executor after one batch, as before)."""
        published = (published + self._flush_outcomes(producer) + self._sending
                     + await self._flush_metrics(producer))
        self._sending = []
        await self.commit_pending()
        self._committing = asyncio.create_task(self._acked_then_commit(consumer, published,
                                                                       offsets))

    async def commit_pending(self) -> None:
        """Wait for the pending background commit, if any (re-raising what it raised)."""
        task, self._committing = self._committing, None
        if task is not None:
            await task

    async def _acked_then_commit(self, consumer: AIOKafkaConsumer,
                                 published: list[asyncio.Task[None]],
                                 offsets: dict[TopicPartition, int]) -> None:
        if published:
            await asyncio.gather(*published)
        for tp, offset in offsets.items():
            await self._commit(consumer, tp, offset)

    async def _commit(self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> None:
        await commit_or_give_up(consumer, tp, offset)

    async def _run_plan(self, producer: RenewingProducer, batch: list[tuple[Any, Any]]
                        ) -> AsyncIterator[tuple[list[int], list[asyncio.Task[None]]]]:
        """Plan the fetched ``batch`` and run the plan's groups one after another in the
        compute thread; yield each group with the tasks publishing what it produced (not
        awaited here) as it finishes.

        The compute thread goes from one group straight to the next: the device does not wait
        for the event loop to publish a result and hand it the next route (with ten sim
        executors, the worker and the broker sharing two cores at 454 workloads/s, the median
        gap between two routes in hand fell from 1.15 to 0.35 ms; BENCHMARKS.md). Once
        ``stopping`` is set the thread starts no other group: the op in hand finishes and is
        published, the rest stays uncommitted for another instance."""
        loop = asyncio.get_running_loop()
        done: Handoff[tuple[Plan, list[int], list[WorkResult] | None] | None] = Handoff(loop)
        halt = threading.Event()  # publishing failed: run nothing more of this plan

        def run_groups() -> None:
            try:
                plan = self._plan(batch)
                for group in plan.groups:
                    if self.stopping.is_set() or halt.is_set():
                        break
                    results = self._execute(plan, group)
                    done.put((plan, group, results))
            finally:
                done.put(None)

        running = loop.run_in_executor(self.compute, run_groups)
        try:
            while (finished := await done.get()) is not None:
                plan, group, results = finished
                yield group, await self._publish_group(producer, plan, group, results)
        finally:
            halt.set()
        await running  # re-raises what stopped the thread, if anything did

    def _execute(self, plan: Plan, group: list[int]) -> list[WorkResult] | None:
        """Run one group (one route, or several as one batched call) in the compute thread;
        None for a route that could not be decoded (dead-lettered by the event loop)."""
        first = plan.routes[group[0]]
        if isinstance(first, str):
            return None
        options: dict[str, Any] = {"device_id": self.device_id, "limits": self.limits,
                                   "slowdown": read_slowdown(self.slowdown_file)}
        if len(group) == 1:
            return [perform(first, self.runtime, link=self.link,
                            parsed=plan.parsed.get(group[0]), **options)]
        return perform_batch([plan.parsed[i] for i in group], self.runtime, **options)

    async def _publish_group(self, producer: RenewingProducer, plan: Plan, group: list[int],
                             results: list[WorkResult] | None) -> list[asyncio.Task[None]]:
        """Gather what one group produced for publishing; return the tasks publishing what
        is published now."""
        if results is None:
            reason = plan.routes[group[0]]
            assert isinstance(reason, str)
            return [asyncio.create_task(
                self._dead_letter(producer, plan.messages[group[0]], reason))]
        self.processed += len(results)
        # A probe (agents/probe.py) is measured but has no outcome: nobody submitted it.
        probes = {route["id"] for i in group
                  if isinstance(route := plan.routes[i], dict) and route.get("probe") is True}
        tasks: list[asyncio.Task[None]] = []
        for result in results:
            tasks += await self._publish(producer, result,
                                         outcome=result.outcome.get("id") not in probes)
        return tasks

    async def _publish(self, producer: RenewingProducer, result: WorkResult,
                       outcome: bool = True) -> list[asyncio.Task[None]]:
        """Gather a result's outcome (unless ``outcome`` is False) and its metric, each
        published with the others of its kind when their batch is due; the tasks of what is
        published now await their acks."""
        # The records' wire bytes without building Faust records (app/records.py
        # ``wire_bytes``: byte for byte the same, ~5 µs a record against ~25).
        row = wire_bytes(MetricRecord, result.metric)
        tasks = []
        if outcome:
            tasks += await self._gather_outcome(producer, str(result.outcome["id"]),
                                                wire_bytes(ResultRecord, result.outcome))
        if self._metric_bytes + len(row) > METRIC_BATCH_MAX_BYTES:
            tasks += await self._flush_metrics(producer)
        loop_time = asyncio.get_running_loop().time()
        if not self._metric_rows:
            self._metric_since = loop_time
        self._metric_rows.append(row)
        self._metric_bytes += len(row) + 1
        if (len(self._metric_rows) >= self.settings.executor_metric_batch_rows
                or (loop_time - self._metric_since) * 1000 >= self.settings.executor_metric_linger_ms):
            tasks += await self._flush_metrics(producer)
        return tasks

    async def _gather_outcome(self, producer: RenewingProducer, workload_id: str,
                              value: bytes) -> list[asyncio.Task[None]]:
        """Hold an outcome for its partition's next batch: published at once when the batch is
        full, else by the linger timer, or before the next commit (the end of the routes in
        hand), whichever comes first."""
        if not self._outcome_partitions:
            self._outcome_partitions = len(await producer.partitions_for(self.topics.outcomes))
        partition = topics.key_partition(workload_id, self._outcome_partitions)
        held = self._outcomes.setdefault(partition, [])
        held.append((workload_id, value))
        if len(held) >= self.settings.executor_outcome_batch_rows:
            return self._flush_outcomes(producer, partition)
        if self._outcome_timer is None:
            self._outcome_timer = asyncio.get_running_loop().call_later(
                self.settings.executor_outcome_linger_ms / 1000.0, self._outcomes_due, producer)
        return []

    def _outcomes_due(self, producer: RenewingProducer) -> None:
        """The linger timer: publish every held outcome (an op is still running)."""
        self._outcome_timer = None
        self._sending += self._flush_outcomes(producer)

    def _flush_outcomes(self, producer: RenewingProducer,
                        only: int | None = None) -> list[asyncio.Task[None]]:
        """Publish the held outcomes (of partition ``only``, or all) as one record per
        partition, keyed by its first workload id."""
        tasks = []
        for partition in [only] if only is not None else list(self._outcomes):
            held = self._outcomes.pop(partition, [])
            if held:
                value = outcome_batch_bytes([v for _, v in held])
                tasks.append(asyncio.create_task(self._send(
                    producer, self.topics.outcomes, held[0][0], value, partition)))
        if not self._outcomes and self._outcome_timer is not None:
            self._outcome_timer.cancel()
            self._outcome_timer = None
        return tasks

    async def _flush_metrics(self, producer: RenewingProducer) -> list[asyncio.Task[None]]:
        """Publish the gathered metric rows as one record (a lone row in the one-row form)."""
        if not self._metric_rows:
            return []
        value = metric_columns_bytes(self._metric_rows)
        self._metric_rows, self._metric_bytes = [], 0
        partition = await self._class_partition(producer, self.topics.metrics)
        return [asyncio.create_task(self._send(producer, self.topics.metrics, self.device_id,
                                               value, partition))]

    async def _dead_letter(self, producer: RenewingProducer, message: Any, reason: str) -> None:
        logger.warning(
            "dead-lettering %s[%d]@%d: %s", message.topic, message.partition, message.offset, reason
        )
        record = DeadLetterRecord(
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            reason=reason,
            raw_b64=base64.b64encode(message.value or b"").decode(),
            stage="executor",
            rejected_at_ms=now_ms(),
            key=message.key.decode("utf-8", "replace") if message.key is not None else None,
        )
        await self._send(producer, self.topics.deadletter, record.key or "", record.dumps())

    # --- heartbeats ------------------------------------------------------------------------
    async def _queue_depth(self, consumer: AIOKafkaConsumer) -> int:
        """Records waiting in our partitions (end offset minus position) plus the one in hand."""
        lag = 0
        for tp in consumer.assignment():
            try:
                end = consumer.highwater(tp)
                if end is None:
                    end = (await consumer.end_offsets([tp]))[tp]
                lag += max(0, end - await consumer.position(tp))
            except (KafkaError, AssertionError, KeyError) as exc:  # revoked meanwhile
                logger.debug("lag of %s unknown: %s", tp, exc)
        return lag + self.in_hand

    def _memory_bytes(self) -> int | None:
        used = self.runtime.memory().get("device_memory_used_bytes")
        if used is not None:
            return used
        import psutil  # host runtimes: the process's resident memory

        return int(psutil.Process().memory_info().rss)

    async def _heartbeat(
        self, producer: RenewingProducer, consumer: AIOKafkaConsumer, state: str = "up"
    ) -> None:
        record = HeartbeatRecord(
            device_id=self.device_id,
            device_class=self.runtime.device_class,
            runtime=self.runtime.name,
            device=self.runtime.device,
            capabilities=self.capabilities,
            queue_depth=await self._queue_depth(consumer),
            sent_at_ms=now_ms(),
            started_at_ms=self.started_at_ms,
            model=self.runtime.device_class.split("-", 2)[-1],
            in_hand=self.in_hand,
            memory_bytes=self._memory_bytes(),
            power_w=(self.nvml.power_w() if self.nvml else self.power.power_w()),
            threads=self.threads,
            cpus=self.cpus,
            host=HOST,
            queue_group=self.queue_group,
            simulated=self.runtime.simulated,
            state=state,
            route_partitions=sorted(tp.partition for tp in consumer.assignment()
                                    if tp.topic == self.route_topic),
            link=self.link.to_dict() if self.link else None,
            price_per_hour=self.price_per_hour,
            power_model=self.runtime.power_model.name if self.runtime.power_model else None,
            calibration=self.calibration,
            kernel_ms=self.kernel_ms,
            setup_excess_ms=self.setup_excess_ms,
        )
        partition = await self._class_partition(producer, self.topics.heartbeats)
        await self._send(producer, self.topics.heartbeats, self.device_id, record.dumps(), partition)

    async def _heartbeat_loop(self, producer: RenewingProducer, consumer: AIOKafkaConsumer) -> None:
        """A heartbeat every ``heartbeat_interval_s``; on the same beat, the consumer's group
        coordinator is watched (app/coordinator_watch.py: found again, or woken, when aiokafka
        stops looking for it after a broker fault)."""
        watch = CoordinatorWatch(after_s=COORDINATOR_WATCH_S)
        while True:
            try:
                await self._heartbeat(producer, consumer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a missed heartbeat is survivable; dying here is not
                logger.warning("heartbeat failed: %s", exc)
            try:
                watch.check_here(consumer, time.monotonic())
            except Exception as exc:  # aiokafka's private state moved: the watch is lost, not us
                logger.warning("coordinator watch failed: %s", exc)
            await asyncio.sleep(self.settings.heartbeat_interval_s)
