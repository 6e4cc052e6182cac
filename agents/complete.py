"""complete: executors' outcomes → exactly one result per workload on switchyard.results.

An outcomes record is one outcome or a batch of them (docs/contract.md); a malformed outcome
of a batch is dead-lettered alone (its own bytes), the others complete.

The completion table's changelog is the results topic, so writing ``completed[id]`` is the
publication itself (``write_through``: the result's bytes into the store and its changelog
record straight to the producer, checked at the next batch); a later outcome for the same id
(a redelivered route, a re-routed workload whose first device was only slow) is a duplicate
and is dropped.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import orjson

from agents import state
from app import observability
from app.faust_patches import take_batches as batches
from app.faust_patches import write_through
from app.gaps import OffsetGuard
from app.main import app, settings, topics
from app.producing import Deliveries
from app.records import OUTCOME_BATCH_VERSION, ResultRecord, row_maker, wire_bytes, wire_fields
from app.streaming import check_fields, dead_letter, decode_object, event_context, now_ms
from app.tables import completed, input_offsets
from models.backlog import InflightEntry, charge_of
from models.handling import handling_key, handling_ms

guard = OffsetGuard("complete", input_offsets)
# Result deliveries not yet acknowledged (checked at each batch: a failed one stops the worker).
results_sent = Deliveries("a result")
REQUIRED, OPTIONAL = wire_fields(ResultRecord)


class Outcome(SimpleNamespace):
    """One checked outcome: a ``ResultRecord``'s fields as attributes (defaults filled in,
    unknown fields left out). Its result on the results topic is ``result_bytes(outcome)``,
    the bytes ``ResultRecord(**fields).dumps()`` would write: building the Faust record and
    having the table serialise it twice (changelog and store) was a third of this stage."""

    id: str


_outcome = row_maker(ResultRecord, Outcome)


def result_bytes(outcome: Outcome) -> bytes:
    """The outcome's result as the results topic carries it (``ResultRecord``'s JSON)."""
    return wire_bytes(ResultRecord, outcome.__dict__)


def parse_outcomes(raw: bytes) -> tuple[list[Outcome], list[tuple[str, bytes]]]:
    """The outcomes an outcomes record carries (one, or a version-2 batch) and the refused
    ones of a batch, each with the reason and its own bytes. ValueError with the reason when
    the record as a whole is malformed."""
    data = decode_object(raw, "outcome")
    if "version" not in data:
        return [check_outcome(data)], []
    if data.get("version") != OUTCOME_BATCH_VERSION or set(data) != {"version", "outcomes"}:
        raise ValueError(f'an outcome batch is {{"version": {OUTCOME_BATCH_VERSION}, '
                         '"outcomes": [...]} and nothing else')
    items = data["outcomes"]
    if not isinstance(items, list) or not items:
        raise ValueError("outcome batch outcomes must be a non-empty list")
    good: list[Outcome] = []
    refused: list[tuple[str, bytes]] = []
    for i, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise ValueError("outcome is not a JSON object")
            good.append(check_outcome(item))
        except ValueError as exc:
            refused.append((f"outcome {i + 1} of {len(items)} in a batch: {exc}",
                            orjson.dumps(item)))
    return good, refused


def check_outcome(data: dict[str, Any]) -> Outcome:
    """An outcome from its decoded fields; ValueError with the reason."""
    check_fields(data, "outcome", REQUIRED, OPTIONAL)
    if data["status"] not in ("ok", "error"):
        raise ValueError(f"outcome status {data['status']!r} is not ok|error")
    return _outcome(data)


@app.agent(topics.outcomes, concurrency=1)
async def complete(stream: Any) -> None:
    """Publish the first outcome of each workload as its result; close its in-flight entry.
    Outcomes the consumer skipped are read back first (app/gaps.py)."""
    async for batch in batches(stream, settings.complete_batch_size,
                               settings.complete_batch_within_s):
        if await results_sent.failed(app):
            return
        began = time.thread_time()
        events = await guard.fill(batch)
        observability.count_batch("complete", len(events))
        for event in events:
            with event_context(event):
                await complete_one(event)
        guard.record(events)
        observability.inc(observability.STAGE_CPU, time.thread_time() - began, stage="complete")


async def complete_one(event: Any) -> None:
    """Turn the outcomes of one record into their workloads' results."""
    try:
        outcomes, refused = parse_outcomes(event.value)
    except ValueError as exc:
        await dead_letter("complete", event, str(exc))
        return
    for reason, raw in refused:
        await dead_letter("complete", event, reason, raw)
    for outcome in outcomes:
        await complete_outcome(outcome)


async def complete_outcome(outcome: Outcome) -> None:
    """Turn one outcome into the workload's result, unless it already has one."""
    key = outcome.id.encode()
    if key in completed:
        observability.inc("switchyard_duplicates_suppressed_total", stage="complete")
        # the result was published but a crash may have lost the in-flight clean-up: do it now
        state.close_inflight(outcome.id, now_ms())
        return
    entry = state.book.get(outcome.id)
    if entry:
        outcome.submitted_at_ms = outcome.submitted_at_ms or entry["workload"].get(
            "submitted_at_ms")
    # The changelog write *is* the result on the topic; handed to the producer, not awaited
    # (app/faust_patches.py::write_through; Faust flushes it before committing the outcome).
    results_sent.add(await write_through(app, completed, key, result_bytes(outcome)))
    observability.inc("switchyard_results_total", device_class=outcome.device_class,
                      status=outcome.status)
    if entry:
        if outcome.device_class == entry.get("device_class"):
            service = service_ms(outcome)
            # What the route cost its executor, for the policy's exploration budget.
            state.settle(outcome.id, service)
            if outcome.status == "ok":
                # How long the class really took against what it was charged: its pace
                # scales the wait the next decisions expect behind its queue
                # (models/backlog.py).
                state.backlog.observe(outcome.device_class, charge_of(entry), service)
                learn_handling(outcome, entry, service)
        state.close_inflight(outcome.id, now_ms())  # seen finished now (models/dispatch.py)


def learn_handling(outcome: Outcome, entry: InflightEntry, service: float) -> None:
    """What the executor spent around the execution, learned per class and precision against
    the bytes the workload moved (models/handling.py). Skipped for a workload that set up a cold shape: its
    warm-up run, outside the execution, would count as handling: the outcome's ``setup_ms``
    (``compile_ms`` from executors that do not report it). On the layers trace, cold runs
    were 23 of NumPy's 73 handling rows (p90 24 ms against 1.8 warm) and JAX's, at 154 ms,
    made the class look ~100 ms slower than it is on every workload."""
    nbytes = entry.get("io_bytes")
    if (nbytes is None or outcome.compile_ms is not None or outcome.setup_ms is not None
            or outcome.finished_at_ms is None):
        return
    share = max(1, outcome.batch_size)
    ms = handling_ms(service, float(outcome.latency_ms) / share, None,
                     None if outcome.transfer_ms is None else outcome.transfer_ms / share)
    if ms is not None:
        precision = str((entry.get("variant") or {}).get("precision") or "fp32")
        state.handling.observe(handling_key(outcome.device_class, precision), float(nbytes), ms)


def service_ms(outcome: Outcome) -> float:
    """How long the executor held the workload: from taking it off its queue to its outcome
    (inputs made, setup, the transfer over a link, execution, checksum): the outcome's
    ``held_ms`` (the executor's monotonic clock), else its own timestamps (whole milliseconds:
    a sub-millisecond workload read 0 or 1, and a row below its execution was dropped, which
    raised a class's handling at small sizes), else the execution plus setup and transfer. On
    the live CPU executors making the inputs and the checksum took 1-3x the execution itself.

    A workload of a batched call shares that time with the call's other workloads (they
    were taken off the queue together and finished together): its service is its share,
    so a class that batches shows a pace below 1 and the router sees its queue drain faster
    than its per-op predictions add up to."""
    share = max(1, outcome.batch_size)
    if outcome.held_ms is not None and outcome.held_ms > 0:  # checked a number or null
        return float(outcome.held_ms) / share
    if outcome.finished_at_ms is not None and outcome.decided_at_ms is not None:
        held = outcome.finished_at_ms - outcome.decided_at_ms - outcome.queue_ms
        if held > 0:
            return float(held) / share
    setup = outcome.setup_ms if outcome.setup_ms is not None else outcome.compile_ms
    return (float(outcome.latency_ms) + float(setup or 0.0)
            + float(outcome.transfer_ms or 0.0)) / share

