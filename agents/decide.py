"""decide: workloads → one routing decision each, on switchyard.routes.<device class>.

Every workload is decided once: a workload id already in flight or completed is a duplicate
delivery and is dropped (counted). Decisions use the cost models of every class (a global
table), the live devices (registry) and the backlog of routed, unfinished work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app import observability
from app.gaps import OffsetGuard
from app.main import app, settings, topics
from app.records import RouteRecord
from app.streaming import dead_letter, event_context, now_ms
from app.tables import (
    backlog,
    completed,
    decisions,
    devices,
    history,
    inflight,
    inflight_charge,
    input_offsets,
    models,
)
from models.costmodel import CostModel
from models.history import HistoryModel
from models.ops import SpecError
from models.policy import Candidate, Decision, make_policy
from models.registry import candidates_for, live_classes
from models.setup import WarmRoutes, expected_setup_ms
from models.workload import Workload, WorkloadLimits, decode_json_bounded, parse_workload

logger = logging.getLogger(__name__)

LIMITS = WorkloadLimits(
    max_elements=settings.max_elements,
    max_inline_elements=settings.max_inline_elements,
    max_message_bytes=settings.max_message_bytes,
    max_depth=settings.max_json_depth,
)
DECISION_RING = 200  # recent decisions kept per partition for /api/decisions


def _policy_options() -> dict[str, Any]:
    if settings.policy == "static":
        return {"device_class": settings.static_class}
    if settings.policy == "oracle":
        from models.oracle import load_true_costs  # only the benchmark's oracle runs need it

        return {"true_ms": load_true_costs(settings.oracle_profile)}
    return {}


policy = make_policy(settings.policy, **_policy_options())
guard = OffsetGuard("decide", input_offsets)
rng = np.random.default_rng(settings.seed)
# Derived caches of the global tables (rebuilt from them on demand, never a source of truth).
_model_cache: dict[str, tuple[int, CostModel]] = {}
_history_cache: list[Any] = []
_declared_classes: set[str] = set()
_ring_cursor: dict[int, int] = {}
# Live classes and learned models as last read, refreshed at most every VIEW_REFRESH_S: a
# tenth of the heartbeat period, far below the device timeout, so staleness is harmless.
VIEW_REFRESH_S = 0.1
_views: dict[str, Any] = {"read_at": -1.0, "classes": {}, "learned": {}, "setup": {}}
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
    total = 0.0
    for partition in range(settings.workload_partitions):
        entry = backlog.get(f"{device_class}#{partition}")
        if entry:
            total += float(entry.get("ms", 0.0))
            total += int(entry.get("count", 0)) * settings.dispatch_overhead_ms
    return max(total, 0.0)


def add_backlog(device_class: str, partition: int, ms: float, count: int) -> None:
    """Add (or with negative numbers, remove) work from a class's backlog."""
    key = f"{device_class}#{partition}"
    entry = backlog.get(key) or {"ms": 0.0, "count": 0}
    backlog[key] = {"ms": max(0.0, float(entry["ms"]) + ms),
                    "count": max(0, int(entry["count"]) + count)}


def record_decision(partition: int, entry: dict[str, Any]) -> str:
    """Put a decision in the partition's ring of recent decisions; return its slot key.

    The ring's cursor is kept in memory rather than in the table (one write less per
    workload): after a restart it starts again at slot 0, overwriting the oldest entries only
    approximately, which is all a view of recent decisions needs. The measured time is joined
    from the results when the ring is read (app/web.py).
    """
    cursor = _ring_cursor.get(partition, 0)
    _ring_cursor[partition] = (cursor + 1) % DECISION_RING
    slot = f"{partition}:{cursor:03d}"
    decisions[slot] = entry
    return slot


@dataclass
class Routed:
    """A decision whose route was handed to the producer; remembered once the broker acks."""

    workload: Workload
    decision: Decision
    record: RouteRecord
    partition: int
    delivery: Any


@dataclass
class Snapshot:
    """What every decision of one batch reads: live classes, their backlog and cost models.

    Read once per batch rather than once per workload (table reads and model deserialisation
    were a third of the decide stage's time); work routed within the batch is added to
    ``backlog_ms`` as it is routed, so a batch does not herd onto one class.
    """

    classes: dict[str, Any]
    backlog_ms: dict[str, float]
    learned: dict[str, CostModel]
    setup: dict[str, Any]

    @classmethod
    def now(cls) -> Snapshot:
        now = time.monotonic()
        if now - _views["read_at"] > VIEW_REFRESH_S:
            # Devices and models change at heartbeat and learning pace: reading (and decoding)
            # them for every small batch cost more than the decisions themselves.
            classes = live_classes(devices_values(), now_ms(), settings.device_timeout_s)
            stored = {c: models.get(c) for c in classes}
            learned = {c: m for c in classes if (m := cost_model(c, stored[c])) is not None}
            setup = {c: (stored[c] or {}).get("setup") for c in classes}
            _views.update(read_at=now, classes=classes, learned=learned, setup=setup)
        classes, learned = _views["classes"], _views["learned"]
        return cls(classes=classes, backlog_ms={c: class_backlog_ms(c) for c in classes},
                   learned=dict(learned), setup=_views["setup"])


def with_setup(workload: Workload, signature: str, candidates: list[Candidate],
               snapshot: Snapshot) -> list[Candidate]:
    """Charge each candidate whose (shape, variant) its class has probably not run yet the
    class's expected setup (models/setup.py)."""
    return [c if warm_routes.is_warm(c.device_class, (signature, c.variant.precision,
                                                     c.variant.mode))
            else replace(c, setup_ms=expected_setup_ms(snapshot.setup.get(c.device_class),
                                                       workload.op.kind, c.variant.mode))
            for c in candidates]


async def send_route(workload: Workload, partition: int, attempt: int,
                     snapshot: Snapshot) -> Routed | None:
    """Decide where ``workload`` runs and hand its route to the producer (without waiting for
    the ack); None when no live class can run it."""
    signature = workload.op.signature()
    candidates = with_setup(workload, signature, candidates_for(workload, snapshot.classes,
                                                                snapshot.backlog_ms), snapshot)
    if not candidates:
        return None
    names = sorted({c.device_class for c in candidates})
    learned = {c: snapshot.learned[c] for c in names if c in snapshot.learned}
    decision = policy.decide(
        workload, candidates, learned,
        history_model(names) if policy.name == "dmda" else None, rng,
    )
    record = RouteRecord(
        id=workload.id,
        workload=dict(workload.raw),
        device_class=decision.device_class,
        variant=decision.variant.to_dict(),
        predicted_ms=float(decision.predicted_ms),
        predicted_std_ms=float(decision.predicted_std_ms),
        predicted_energy_j=decision.predicted_energy_j,
        reason=decision.reason,
        model_version=int(decision.model_version),
        decided_at_ms=now_ms(),
        policy=policy.name,
        expected_wait_ms=float(decision.expected_wait_ms),
        meets_deadline=bool(decision.meets_deadline),
        attempt=attempt,
    )
    topic = topics.route(decision.device_class)
    if decision.device_class not in _declared_classes:
        await topic.maybe_declare()  # a class's route topic is created when it first appears
        _declared_classes.add(decision.device_class)
    warm_routes.mark(decision.device_class, (signature, decision.variant.precision,
                                             decision.variant.mode))
    snapshot.backlog_ms[decision.device_class] = (
        snapshot.backlog_ms.get(decision.device_class, 0.0) + record.predicted_ms
        + decision.setup_ms + settings.dispatch_overhead_ms)
    delivery = await topic.send(key=workload.id, value=record.dumps())
    return Routed(workload, decision, record, partition, delivery)


def remember(routed: Routed) -> None:
    """Record a sent route: recent decisions, and (unless already answered) in flight.

    Runs only after the broker acked the route: were the in-flight entry to reach its changelog
    and the route be lost in a crash, the workload would be taken for a duplicate after the
    restart and never run. The other order risks only a second route, whose result the
    complete stage suppresses.
    """
    workload, record = routed.workload, routed.record
    slot = record_decision(routed.partition, {
        "id": workload.id, "device_class": record.device_class,
        "variant": record.variant, "predicted_ms": record.predicted_ms,
        "predicted_std_ms": record.predicted_std_ms, "reason": record.reason,
        "policy": policy.name, "decided_at_ms": record.decided_at_ms, "attempt": record.attempt,
        "meets_deadline": record.meets_deadline, "measured_ms": None, "status": None,
    })
    observability.inc("switchyard_decisions_total", device_class=record.device_class,
                      policy=policy.name, reason=record.reason)
    # While the acks were awaited the event loop ran the complete stage: a fast device may
    # already have answered. Then there is nothing left in flight to remember.
    if workload.id.encode() in completed:
        return
    # What the class's backlog is charged: the execution, plus the setup of a cold shape.
    charge = record.predicted_ms + routed.decision.setup_ms
    inflight[workload.id] = {
        "device_class": record.device_class, "variant": record.variant,
        "predicted_ms": record.predicted_ms, "charged_ms": charge,
        "decided_at_ms": record.decided_at_ms,
        "attempt": record.attempt, "partition": routed.partition, "slot": slot,
        "workload": dict(workload.raw),
    }
    add_backlog(record.device_class, routed.partition, charge, 1)


async def route(workload: Workload, partition: int, attempt: int = 1) -> Decision | None:
    """Decide, send, await the ack and remember one workload (the re-route path)."""
    routed = await send_route(workload, partition, attempt, Snapshot.now())
    if routed is None:
        return None
    await routed.delivery
    remember(routed)
    return routed.decision


async def wait_for_devices() -> None:
    """Hold the stream while no device is live at all: the work waits rather than being
    rejected (at start-up the registry may not have read a heartbeat yet)."""
    waited = 0.0
    while not live_classes(devices_values(), now_ms(), settings.device_timeout_s):
        if waited % 30 == 0:
            logger.warning("no live device; holding the workload stream until one appears")
        await asyncio.sleep(0.5)
        waited += 0.5


def devices_values() -> list[dict[str, Any]]:
    """Every device record in the registry's global table."""
    return [d for d in devices.values() if d]


@app.agent(topics.workloads, concurrency=1)
async def decide(stream: Any) -> None:
    """One decision per workload, in batches: the routes of a batch are sent together and their
    acks awaited together. Bad input is dead-lettered and the stream goes on. Workloads the
    consumer skipped are read back and decided with the batch that revealed them
    (app/gaps.py)."""
    async for batch in stream.take_events(settings.decide_batch_size,
                                          within=settings.decide_batch_within_s):
        events = await guard.fill(batch)
        await decide_batch(events)
        guard.record(events)


async def decide_batch(batch: list[Any]) -> None:
    """Decide, route and remember one batch of workload events."""
    accepted: list[tuple[Any, Workload]] = []
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
        if (workload.id in seen or workload.id.encode() in completed
                or inflight.get(workload.id)):
            observability.inc("switchyard_duplicates_suppressed_total", stage="decide")
            continue
        seen.add(workload.id)
        accepted.append((event, workload))
    if not accepted:
        return
    await wait_for_devices()
    snapshot = Snapshot.now()
    sent: list[tuple[Any, Routed]] = []
    for event, workload in accepted:
        routed = await send_route(workload, event.message.partition, 1, snapshot)
        if routed is None:
            await dead_letter("decide", event, "no live device class can run this workload "
                              f"({workload.op.kind} in {', '.join(workload.precisions)})")
            continue
        sent.append((event, routed))
    await asyncio.gather(*(routed.delivery for _, routed in sent))
    for event, routed in sent:
        with event_context(event):
            remember(routed)


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
        entry = inflight.get(workload_id)
        if not entry or int(entry.get("attempt", 1)) != attempt or workload_id.encode() in completed:
            continue  # already completed or already routed again
        try:
            workload = parse_workload(entry["workload"], LIMITS)
        except SpecError as exc:  # accepted once, so this would be a bug: keep the evidence
            await dead_letter("reroute", event, f"stored workload no longer valid: {exc}")
            continue
        with event_context(event):
            decision = await route(workload, int(entry.get("partition", 0)), attempt + 1)
            if decision is not None:
                add_backlog(entry["device_class"], int(entry.get("partition", 0)),
                            -inflight_charge(entry), -1)
        if decision is not None:
            observability.inc("switchyard_reroutes_total", from_class=entry["device_class"],
                              to_class=decision.device_class)
            logger.info("re-routed %s from %s to %s (attempt %d)", workload_id,
                        entry["device_class"], decision.device_class, attempt + 1)
