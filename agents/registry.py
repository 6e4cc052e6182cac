"""registry: heartbeats → the devices table; the re-route timer for classes that died."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from aiokafka.errors import KafkaError

from agents import state
from app import observability
from app.gaps import reader
from app.main import app, settings, topics
from app.records import HeartbeatRecord, wire_fields
from app.streaming import check_fields, dead_letter, decode_object, event_context, now_ms
from app.tables import devices
from app.topics import is_device_class
from models.registry import check_calibration, check_kernel_ms, check_setup_excess, live_classes
from models.transfer import parse_link, parse_price

logger = logging.getLogger(__name__)
HEARTBEAT_BATCH = 200
# Heartbeats read back per partition when the devices table looks stale (``read_back``).
READ_BACK_RECORDS = 64
# Device records read straight from the heartbeats topic (``read_back``), by device id: newer
# than the table's while this worker's registry stream is behind.
_read_back: dict[str, dict[str, Any]] = {}
HEARTBEAT_FIELDS, HEARTBEAT_OPTIONAL = wire_fields(HeartbeatRecord)


def parse_heartbeat(raw: bytes) -> HeartbeatRecord:
    """Decode and check a heartbeat; ValueError with the reason when it is not one."""
    data = decode_object(raw, "heartbeat")
    check_fields(data, "heartbeat", HEARTBEAT_FIELDS, HEARTBEAT_OPTIONAL)
    if not is_device_class(data["device_class"]):
        # A class name becomes a route topic name: one that is not topic-safe would make
        # every decision for it fail.
        raise ValueError(f"heartbeat device_class {data['device_class'][:80]!r} is not a "
                         "topic-safe <runtime>-<device kind>-<model> name")
    try:
        parse_link(data.get("link"))  # a negative bandwidth would make transfers negative
        parse_price(data.get("price_per_hour"))
        check_calibration(data.get("calibration"))
        check_kernel_ms(data.get("kernel_ms"))
        check_setup_excess(data.get("setup_excess_ms"))
    except ValueError as exc:
        raise ValueError(f"heartbeat: {exc}") from None
    try:
        return HeartbeatRecord.from_data(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed heartbeat: {exc}") from None


@app.agent(topics.heartbeats, concurrency=1)
async def registry(stream: Any) -> None:
    """Keep each device's last heartbeat; only the newest per device in a batch is written."""
    async for batch in stream.take_events(HEARTBEAT_BATCH, within=0.2):
        newest = {}
        for event in batch:
            try:
                heartbeat = parse_heartbeat(event.value)
            except ValueError as exc:
                await dead_letter("registry", event, str(exc))
                continue
            newest[heartbeat.device_id] = (event, heartbeat)
        seen = now_ms()
        for device_id, (event, heartbeat) in newest.items():
            with event_context(event):
                devices[device_id] = {**heartbeat.asdict(), "last_seen_ms": seen}


def device_records() -> list[dict[str, Any]]:
    """Every device's newest record: the devices table's, or one read back from the
    heartbeats topic that is newer."""
    out = {d["device_id"]: d for d in devices.values() if d and "device_id" in d}
    for device_id, record in _read_back.items():
        current = out.get(device_id)
        if current is None or record["last_seen_ms"] > float(current.get("last_seen_ms", 0)):
            out[device_id] = record
    return list(out.values())


async def read_back() -> int | None:
    """Read the newest heartbeats straight from the topic; the devices they show alive, or
    None when the broker could not be read (an outage: the devices table stands, and the
    caller tries again on its next turn; an error here once stopped the whole worker).

    The registry's stream shares the worker's consumer with the workload stream, and Faust
    hands a fetched record to its stream only once the stream before it took its own: in a
    burst, thousands of queued workloads delay the heartbeats behind them past the device
    timeout, every device looks dead, and a decider that then waited for a live device
    waited for ever (its full stream blocked the heartbeats it waited for). Read back, a
    heartbeat counts from its record's timestamp (the executor's send time: the hosts' clocks
    must agree within the timeout), not from when this worker read it.
    """
    topic = topics.heartbeats.get_topic_name()
    try:
        messages = await reader.tail(topic, range(settings.metric_partitions),
                                     READ_BACK_RECORDS)
    except (KafkaError, OSError, TimeoutError) as exc:
        logger.warning("could not read heartbeats back from %s (%s); trying again later",
                       topic, exc)
        return None
    newest: dict[str, dict[str, Any]] = {}
    for message in messages:
        try:
            heartbeat = parse_heartbeat(message.value or b"")
        except ValueError:
            continue  # the registry dead-letters it when its stream gets there
        seen = message.timestamp * 1000.0
        if seen > newest.get(heartbeat.device_id, {}).get("last_seen_ms", -1.0):
            newest[heartbeat.device_id] = {**heartbeat.asdict(), "last_seen_ms": seen}
    _read_back.update(newest)
    now = now_ms()
    alive = sum(1 for r in newest.values()
                if now - r["last_seen_ms"] <= settings.device_timeout_s * 1000.0)
    (logger.warning if alive else logger.debug)(
        "no live device in the devices table; read %d heartbeat(s) back from %s: %d device(s) "
        "alive", len(messages), topic, alive)
    return alive


def live_view() -> dict:
    """The live classes now, from the devices table (and heartbeats read back)."""
    return live_classes(device_records(), now_ms(), settings.device_timeout_s)


def stranded_classes(live: dict) -> set[str]:
    """Classes with routed, unfinished work (this worker's backlog) and no live device."""
    return {c for c in state.backlog.busy_classes() if c not in live}


_last_reroute_sent: dict[str, float] = {}


@app.timer(interval=settings.reroute_check_s)
async def reroute_dead_classes() -> None:
    """Ask for a new decision for in-flight work whose class has no live device.

    The request goes through the internal reroutes topic, keyed by workload id, so the new
    decision is made (and the in-flight table written) by the stage owning that workload.
    """
    classes = live_view()
    for device_class, view in classes.items():
        observability.set_gauge("switchyard_live_devices", view.live_instances,
                                device_class=device_class)
    if not classes:
        return  # nowhere to go; the work waits for a device to come back
    if not stranded_classes(classes):
        return  # the common case: no dead class holds work, so no scan of the in-flight table
    # Before work moves, the heartbeats topic itself confirms the deaths (this worker's
    # registry stream may only be behind); unreadable (the broker is away), nothing moves.
    if await read_back() is None:
        return
    classes = live_view()
    if not classes or not stranded_classes(classes):
        return
    grace_ms = settings.device_timeout_s * 1000.0
    now = now_ms()
    sent = 0
    for workload_id, entry in state.book.items():
        if not entry or entry.get("device_class") in classes:
            continue
        if now - float(entry.get("decided_at_ms", now)) < grace_ms:
            continue  # routed moments ago: its class may not have sent a heartbeat yet
        attempt = int(entry.get("attempt", 1))
        if time.monotonic() - _last_reroute_sent.get(f"{workload_id}#{attempt}", -1e9) < 10.0:
            continue
        _last_reroute_sent[f"{workload_id}#{attempt}"] = time.monotonic()
        await topics.reroutes.send(key=workload_id, value=json.dumps(
            {"id": workload_id, "attempt": attempt, "from_class": entry.get("device_class")}
        ).encode())
        sent += 1
    if sent:
        logger.warning("asked to re-route %d in-flight workloads of dead classes", sent)
    if len(_last_reroute_sent) > 100_000:
        _last_reroute_sent.clear()
