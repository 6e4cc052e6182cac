"""decide: workloads → one routing decision each, on switchyard.routes.<device class>.

Every workload is decided once: a workload id already completed, or in flight from another
record, is a duplicate submission and is dropped (counted); the *same* record delivered again
after a crash is routed again (its first route may not have reached the broker). Decisions use
the cost models of every class (a global table), the live devices (registry) and the backlog of
routed, unfinished work (agents/state.py, in memory).

Routes are handed to the producer (straight to aiokafka's, app/faust_patches.py::send_record)
and not awaited: Faust flushes the producer before it commits
the workload offsets (at-least-once), and a route that failed for good crashes the worker, so
no offset is committed past a route the broker does not hold.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents import registry, state
from app import observability
from app.faust_patches import send_record
from app.faust_patches import take_batches as batches
from app.gaps import OffsetGuard
from app.main import app, settings, topics
from app.producing import Deliveries
from app.records import RouteRecord, wire_bytes
from app.streaming import dead_letter, event_context, now_ms
from app.tables import completed, history, input_offsets, models
from models.backlog import InflightEntry
from models.costmodel import CostModel
from models.dispatch import (
    colocated,
    core_left,
    core_sharing,
    device_wait_ms,
    queue_sharing,
    route_partition,
)
from models.history import HistoryModel
from models.inflight import batch_key, reroute_key
from models.ops import SpecError
from models.policy import Decision, OverBudget, make_policy
from models.registry import live_classes
from models.routing import (
    Snapshot,
    charge,
    choose,
    inflight_entry,
    memo_io_bytes,
    offers,
    route_fields,
)
from models.setup import WarmRoutes
from models.workload import Workload, WorkloadLimits, decode_json_bounded, parse_workload

logger = logging.getLogger(__name__)

LIMITS = WorkloadLimits(
    max_elements=settings.max_elements,
    max_inline_elements=settings.max_inline_elements,
    max_message_bytes=settings.max_message_bytes,
    max_depth=settings.max_json_depth,
)


def _policy_options() -> dict[str, Any]:
    if settings.policy == "static":
        return {"device_class": settings.static_class}
    if settings.policy == "oracle":
        from models.oracle import load_true_costs  # only the benchmark's oracle runs need it

        return {"true_ms": load_true_costs(settings.oracle_profile)}
    return {}


policy = make_policy(settings.policy, **_policy_options())
# The exploration budget learns what its charges really cost (SwitchyardPolicy.settle).
state.settle = getattr(policy, "settle", state.settle)
guard = OffsetGuard("decide", input_offsets)
rng = np.random.default_rng(settings.seed)
# Derived caches of the global tables (rebuilt from them on demand, never a source of truth).
_model_cache: dict[str, tuple[int, CostModel]] = {}
_history_cache: list[Any] = []
_declared_classes: set[str] = set()
# Route deliveries not yet acknowledged (checked at each batch: a failed one stops the worker).
routes_sent = Deliveries("a route")
# Live classes and learned models as last read, refreshed at most every VIEW_REFRESH_S: a
# tenth of the heartbeat period, far below the device timeout, so staleness is harmless.
VIEW_REFRESH_S = 0.1
# The learned models are read again less often: each is ~19 KB of JSON to decode (and a
# model to rebuild whenever its version moved, i.e. after every metric batch), and at 10
# workloads/s those reads were a third of the decide stage's CPU. Half a second of learning
# lag is harmless; a class that just appeared is read at once.
MODEL_REFRESH_S = 0.5
_views: dict[str, Any] = {"read_at": -1.0, "models_at": -1.0, "classes": {}, "learned": {},
                          "setup": {}, "transfer": {}, "sharing": {}, "queued_with": {}}
# Which (shape, variant) this decider has sent to each class: those are probably warm there.
warm_routes = WarmRoutes()


def cost_model(device_class: str, stored: dict[str, Any] | None) -> CostModel | None:
    """The class's learned cost model from its stored form, deserialised once per version; None
    while the class has none (the policy then falls back on its roofline prior and says so)."""
    if not stored:
        return None
    version = int(stored.get("version", 0))
    cached = _model_cache.get(device_class)
    if cached is None or cached[0] != version:
        cached = (version, CostModel.from_dict(stored))
        _model_cache[device_class] = cached
    return cached[1]


def history_model(device_classes: list[str]) -> HistoryModel:
    """The StarPU-style history of the given classes (the dmda baseline reads it), rebuilt
    only when a class's stored history changed."""
    versions = tuple((c, int((history.get(c) or {}).get("version", -1))) for c in device_classes)
    if _history_cache and _history_cache[0] == versions:
        return _history_cache[1]
    merged = HistoryModel()
    for device_class in device_classes:
        stored = history.get(device_class)
        if stored:
            merged.merge(HistoryModel.from_dict(stored))
    _history_cache[:] = [versions, merged]
    return merged


def class_backlog_ms(device_class: str) -> float:
    """Predicted ms of routed, unfinished work of a class, over this worker's partitions.

    Each workload also costs its executor a dispatch overhead outside the measured execution
    (fetch, publish, commit: several ms against sub-ms executions of small ops); counting it
    keeps the wait honest when a fast class is handed many small ops.
    """
    return state.backlog.ms(device_class, settings.dispatch_overhead_ms)


@dataclass
class Routed:
    """A decision whose route was handed to the producer."""

    workload: Workload
    decision: Decision
    fields: dict[str, Any]  # the route record's fields (app/records.py ``RouteRecord``)
    partition: int
    offset: int | None
    delivery: Any
    io_bytes: int  # what its executor takes in and gives out (models/routing.py ``io_bytes``)
    route_partition: int | None = None  # the device's partition it was sent to (None: by key)


def snapshot_now() -> Snapshot:
    """What every decision of one batch reads: live classes, their backlog (this worker's and
    the other workers' shares), learned models and setup costs. Read once per batch rather
    than once per workload (table reads and model deserialisation were a third of the decide
    stage's time)."""
    refresh_views()
    classes = _views["classes"]
    return Snapshot(classes=classes, backlog_ms={c: class_backlog_ms(c) for c in classes},
                    learned=dict(_views["learned"]), setup=_views["setup"],
                    transfer=_views["transfer"], sharing=_views["sharing"],
                    queued_with=_views["queued_with"],
                    handling=state.handling, memo={})


def refresh_views(force: bool = False) -> dict[str, Any]:
    """The live classes (and their learned models), read again from the global tables when
    the last read is older than VIEW_REFRESH_S: devices and models change at heartbeat and
    learning pace, and reading (and decoding) them for every small batch cost more than the
    decisions themselves."""
    now = time.monotonic()
    if force or now - _views["read_at"] > VIEW_REFRESH_S:
        classes = live_classes(devices_values(), now_ms(), settings.device_timeout_s)
        _views.update(read_at=now, classes=classes, sharing=core_sharing(classes),
                      queued_with=queue_sharing(classes))
        if (force or now - _views["models_at"] > MODEL_REFRESH_S
                or not set(classes) <= set(_views["setup"])):
            stored = {c: models.get(c) for c in classes}
            learned = {c: m for c in classes if (m := cost_model(c, stored[c])) is not None}
            setup = {c: (stored[c] or {}).get("setup") for c in classes}
            transfer = {c: (stored[c] or {}).get("transfer") for c in classes}
            _views.update(models_at=now, learned=learned, setup=setup, transfer=transfer)
    return _views["classes"]


async def route_topic(device_class: str) -> Any:
    """The class's route topic, created when the class first appears."""
    topic = topics.route(device_class)
    if device_class not in _declared_classes:
        await topic.maybe_declare()
        _declared_classes.add(device_class)
    return topic


async def send_route(workload: Workload, partition: int, offset: int | None, attempt: int,
                     snapshot: Snapshot) -> Routed | None:
    """Decide where ``workload`` runs and hand its route to the producer (without waiting for
    the ack); None when no live class can run it. ``OverBudget`` when no class is predicted
    to stay within its ``max_cost``."""
    # The wait at each class's least-loaded device, from the backlog as charged so far (each
    # route of this batch included): where the route would go (models/dispatch.py).
    now = now_ms()
    # Classes pinned to shared cores or sharing a queue wait for each other's work too.
    waits = {c: device_wait_ms(state.backlog, view, settings.dispatch_overhead_ms, now)
             for c, view in snapshot.classes.items()}
    snapshot.device_wait_ms, snapshot.core_busy_ms = colocated(
        snapshot.classes, snapshot.sharing, waits, snapshot.backlog_ms, snapshot.queued_with)
    if snapshot.sharing:
        snapshot.core_left = core_left(
            snapshot.classes, snapshot.sharing, waits, snapshot.backlog_ms,
            {c: state.backlog.count(c) for c in snapshot.sharing})
    nbytes = memo_io_bytes(workload, snapshot)
    candidates = offers(workload, snapshot, warm_routes, nbytes)
    if not candidates:
        return None
    history_view = (history_model(sorted({c.device_class for c in candidates}))
                    if policy.name == "dmda" else None)
    decision = choose(policy, workload, candidates, snapshot.learned, history_view, rng,
                      snapshot.memo)
    fields = route_fields(workload, decision, policy.name, attempt, now_ms())
    topic = await route_topic(decision.device_class)
    charge(snapshot, warm_routes, workload, decision, settings.dispatch_overhead_ms)
    # The class's least-loaded device takes it (models/dispatch.py); by key where unknown.
    lane = route_partition(state.backlog, snapshot.classes[decision.device_class],
                           settings.dispatch_overhead_ms)
    # Straight to the producer (app/faust_patches.py::send_record): the routes of a batch
    # leave together, and Faust's pre-commit flush still covers them.
    delivery = await send_record(app, topic.get_topic_name(), workload.id.encode(),
                                 wire_bytes(RouteRecord, fields), lane)
    return Routed(workload, decision, fields, partition, offset, delivery, nbytes, lane)


def remember(routed: Routed, key: str, previous: InflightEntry | None) -> None:
    """Record a sent route: in flight in batch ``key`` (replacing ``previous``, the entry of an
    earlier route of the same workload), the class's backlog charge, and the ring of recent
    decisions. The batch is stored once it is routed (``state.write_inflight``).

    Written as the route is handed to the producer, not after its ack. If a crash loses the
    route but not this entry, the workload's record is delivered again (its offset was never
    committed) and the entry's ``offset`` tells that redelivery from a duplicate submission:
    it is routed again. If the entry is lost but the route is not, the workload runs twice and
    the complete stage publishes only the first result.
    """
    workload, route = routed.workload, routed.fields
    device_class = str(route["device_class"])
    state.record_decision(routed.partition, route)
    state.note_route(workload, device_class)
    observability.inc("switchyard_decisions_total", device_class=device_class,
                      policy=policy.name, reason=str(route["reason"]))
    entry = inflight_entry(route, routed.decision.setup_ms, routed.partition, routed.offset,
                           routed.decision.handling_ms, routed.io_bytes)
    if routed.route_partition is not None:
        entry["route_partition"] = routed.route_partition
    state.add_inflight(key, routed.partition, workload.id, entry, previous)


async def route(workload: Workload, partition: int, attempt: int,
                previous: InflightEntry | None) -> Decision | None:
    """Decide, send, await the ack and remember one workload (the re-route path)."""
    routed = await send_route(workload, partition, previous.get("offset") if previous else None,
                              attempt, snapshot_now())
    if routed is None:
        return None
    key = reroute_key(partition, workload.id, attempt)
    remember(routed, key, previous)
    state.write_inflight(key)
    await routed.delivery
    return routed.decision


async def wait_for_devices() -> None:
    """Hold the stream while no device is live at all: the work waits rather than being
    rejected (at start-up the registry may not have read a heartbeat yet). Every 2 s the
    heartbeats topic itself is read (``registry.read_back``): held, this stream keeps the
    registry's from catching up once its buffer is full."""
    waited = 0.0
    while not refresh_views(force=waited > 0):
        if waited % 2 == 0 and await registry.read_back() and refresh_views(force=True):
            return
        if waited % 30 == 0:
            logger.warning("no live device; holding the workload stream until one appears")
        await asyncio.sleep(0.5)
        waited += 0.5


def devices_values() -> list[dict[str, Any]]:
    """Every device's newest record (the registry's table, or read back from the topic)."""
    return registry.device_records()


@app.agent(topics.workloads, concurrency=1)
async def decide(stream: Any) -> None:
    """One decision per workload, in batches. Bad input is dead-lettered and the stream goes
    on. Workloads the consumer skipped are read back and decided with the batch that revealed
    them (app/gaps.py). A route the producer gave up on stops the worker (``app.crash``): its
    workload's offset must not be committed."""
    async for batch in batches(stream, settings.decide_batch_size,
                               settings.decide_batch_within_s):
        if await routes_sent.failed(app):
            return
        began = time.thread_time()
        events = await guard.fill(batch)
        observability.count_batch("decide", len(events))
        await decide_batch(events)
        guard.record(events)
        observability.inc(observability.STAGE_CPU, time.thread_time() - began, stage="decide")


def is_completed(workload_id: str, event: Any) -> bool:
    """Whether the workload of ``event`` already has its result: looked up in the ``completed``
    table's partition of the event. Faust looks a key up only in the partition of the current
    event, which in a batch is the last one the stream delivered, not this one: in the
    reliability suite (test_rebalance, CI 2026-12-07) workloads of partition 3 re-read after
    a rebalance, in a batch that ended with another partition's record, were looked up in that
    partition's store, taken for new, routed again and given a second result."""
    with event_context(event):
        return workload_id.encode() in completed


def redelivered(entry: InflightEntry, event: Any) -> bool:
    """Whether an in-flight entry was written for this very workload record (delivered again
    after a crash) rather than for an earlier submission of the same id."""
    offset = entry.get("offset")
    return (offset is not None and int(offset) == event.message.offset
            and int(entry.get("partition", -1)) == event.message.partition)


async def decide_batch(batch: list[Any]) -> None:
    """Decide and route one batch of workload events; their routes are handed to the producer
    together and not awaited (see the module's docstring)."""
    accepted: list[tuple[Any, Workload, InflightEntry | None]] = []
    seen: set[str] = set()
    for event in batch:
        try:
            workload = parse_workload(
                decode_json_bounded(event.value, LIMITS.max_message_bytes, LIMITS.max_depth),
                LIMITS,
            )
        except SpecError as exc:
            await dead_letter("decide", event, str(exc))
            continue
        previous = None if workload.id in seen else state.book.get(workload.id)
        if (workload.id in seen or is_completed(workload.id, event)
                or (previous and not redelivered(previous, event))):
            observability.inc("switchyard_duplicates_suppressed_total", stage="decide")
            continue
        if previous:
            observability.inc("switchyard_routes_resent_total", stage="decide")
        seen.add(workload.id)
        accepted.append((event, workload, previous))
    if not accepted:
        return
    await wait_for_devices()
    snapshot = snapshot_now()
    # One in-flight batch per workload partition, named by its first record.
    firsts: dict[int, int] = {}
    for event, _, _ in accepted:
        partition, offset = event.message.partition, event.message.offset
        firsts[partition] = min(offset, firsts.get(partition, offset))
    keys = {partition: batch_key(partition, offset) for partition, offset in firsts.items()}
    for event, workload, previous in accepted:
        try:
            routed = await send_route(workload, event.message.partition, event.message.offset,
                                      1, snapshot)
        except OverBudget as exc:
            await dead_letter("decide", event, str(exc))
            continue
        if routed is None:
            await dead_letter("decide", event, "no live device class can run this workload "
                              f"({workload.op.kind} in {', '.join(workload.precisions)})")
            continue
        with event_context(event):
            remember(routed, keys[event.message.partition], previous)
        routes_sent.add(routed.delivery)
    for key in keys.values():
        state.write_inflight(key)


@app.agent(topics.reroutes, concurrency=1)
async def reroute(stream: Any) -> None:
    """Route again the in-flight workloads whose class died (requested by the registry)."""
    async for event in stream.events():
        try:
            request = json.loads(event.value)
            workload_id, attempt = str(request["id"]), int(request["attempt"])
        except (ValueError, KeyError, TypeError) as exc:
            await dead_letter("reroute", event, f"malformed re-route request: {exc}")
            continue
        entry = state.book.get(workload_id)
        if not entry or int(entry.get("attempt", 1)) != attempt or is_completed(
                workload_id, state.partition_write(int(entry.get("partition", 0)))):
            continue  # already completed or already routed again
        try:
            workload = parse_workload(entry["workload"], LIMITS)
        except SpecError as exc:  # accepted once, so this would be a bug: keep the evidence
            await dead_letter("reroute", event, f"stored workload no longer valid: {exc}")
            continue
        try:
            with event_context(event):
                decision = await route(workload, int(entry.get("partition", 0)), attempt + 1,
                                       entry)
        except OverBudget as exc:
            await dead_letter("reroute", event, f"no class left within max_cost: {exc}")
            continue
        if decision is not None:
            observability.inc("switchyard_reroutes_total", from_class=entry["device_class"],
                              to_class=decision.device_class)
            logger.info("re-routed %s from %s to %s (attempt %d)", workload_id,
                        entry["device_class"], decision.device_class, attempt + 1)
