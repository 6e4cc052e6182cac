"""Helpers shared by the agents: event context for batched table writes, dead letters, time."""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import time
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from app import observability
from app.faust_patches import current_event
from app.main import app, settings, topics
from app.records import DeadLetterRecord
from models.ops import SpecError
from models.workload import decode_json_bounded

logger = logging.getLogger(__name__)
MAX_REASON_CHARS = 2000


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (timestamps on the wire)."""
    return time.time_ns() // 1_000_000


@contextlib.contextmanager
def event_context(event: Any) -> Iterator[None]:
    """Make ``event`` the current event while writing tables for it.

    Faust writes a table change to the changelog partition of the current event. A batch from
    ``take_events`` mixes partitions; setting the event whose key a write belongs to keeps the
    state co-partitioned with its source, so it moves with the partition on a rebalance.
    """
    token = current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        current_event.reset(token)


class PartitionWrite:
    """The current event of a table write that belongs to a partition of ``topic`` rather than
    to the event being processed (a write from a timer; one written after a batch that mixed
    partitions): Faust writes a table change to the current event's partition."""

    def __init__(self, topic: str, partition: int = 0) -> None:
        self.message = SimpleNamespace(topic=topic, partition=partition, offset=-1, key=None,
                                       value=None, timestamp=time.time())


def assigned_partitions(topic: str) -> set[int]:
    """The partitions of ``topic`` this worker owns now (none before the first assignment)."""
    try:
        assigned = app.assignor.assigned_actives()
    except Exception:  # noqa: BLE001 - no assignment yet
        return set()
    return {tp.partition for tp in assigned if tp.topic == topic}


def _key_text(key: Any) -> str | None:
    if key is None:
        return None
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="replace")[:512]
    return str(key)[:512]


async def dead_letter(stage: str, event: Any, reason: str, raw: bytes | None = None) -> None:
    """Send the event's original bytes (or ``raw``: the refused part of a batch) to
    switchyard.deadletter with the reason; count it."""
    message = event.message
    if raw is None:
        raw = message.value if isinstance(message.value, bytes) else str(message.value).encode()
    record = DeadLetterRecord(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        reason=reason[:MAX_REASON_CHARS],
        raw_b64=base64.b64encode(raw or b"").decode(),
        stage=stage,
        rejected_at_ms=now_ms(),
        key=_key_text(message.key),
    )
    await topics.deadletter.send(key=record.key, value=record.dumps())
    observability.inc("switchyard_deadletters_total", stage=stage)
    logger.warning("dead-lettered %s[%s]@%s (%s): %s", message.topic, message.partition,
                   message.offset, stage, record.reason[:200])


def decode_object(raw: Any, what: str) -> dict[str, Any]:
    """Decode a message value as a JSON object within the size and depth limits (no NaN, no
    recursion on ``[[[[…``); ValueError with the reason otherwise."""
    try:
        data = decode_json_bounded(raw, settings.max_message_bytes, settings.max_json_depth)
    except SpecError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data


_DECODED = {"string": str, "object": dict, "list": list, "integer": int, "boolean": bool,
            "number": float}


def is_kind(value: Any, kind: str) -> bool:
    """Whether a decoded JSON value is of a field kind (string, object, list, integer, boolean,
    number: finite, not a bool), as `check_fields` checks each field."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "list":
        return isinstance(value, list)
    if kind == "integer":
        return type(value) is int
    if kind == "boolean":
        return isinstance(value, bool)
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))  # "number"


_CHECKERS: dict[tuple[int, int], tuple[dict[str, str], dict[str, str] | None, Any]] = {}


def _compile_checker(required: dict[str, str], optional: dict[str, str] | None) -> Any:
    """A function ``check(data) -> bool``: True when every field has the class JSON decodes
    its kind to (a float finite, an optional field possibly null), in straight-line code built
    once per pair of field dicts, as ``dataclasses`` builds its methods; False sends the record
    to the full check, which says what is wrong."""
    lines = ["def check(data):", "    get = data.get"]
    env: dict[str, Any] = {"isfinite": math.isfinite, "ABSENT": object()}
    for i, (name, kind) in enumerate([*required.items(), *(optional or {}).items()]):
        env[f"c{i}"] = _DECODED[kind]
        nullable = i >= len(required)
        lines.append(f"    v = get({name!r}{'' if nullable else ', ABSENT'})")
        test = f"v.__class__ is not c{i}"
        if kind == "number":
            test = f"({test} or not isfinite(v))"
        lines.append(f"    if {'v is not None and ' if nullable else ''}{test}: return False")
    lines.append("    return True")
    exec("\n".join(lines), env)  # noqa: S102  (generated from the field dicts above only)
    return env["check"]


def _checker(required: dict[str, str], optional: dict[str, str] | None) -> Any:
    """The compiled check of a pair of field dicts (module constants; a new dict object gets
    its own)."""
    key = (id(required), id(optional))
    cached = _CHECKERS.get(key)
    if cached is None or cached[0] is not required or cached[1] is not optional:
        cached = (required, optional, _compile_checker(required, optional))
        _CHECKERS[key] = cached
    return cached[2]


def check_fields(data: dict[str, Any], what: str, required: dict[str, str],
                 optional: dict[str, str] | None = None) -> None:
    """Refuse a record whose fields are missing or of the wrong kind (string, number,
    integer, boolean, object, list; optional ones may be null). Faust records do not check types,
    and a mistyped field stored in a table crashes whichever stage reads it later."""
    if _checker(required, optional)(data):
        return  # every field of exactly the decoded class: the common case, settled at once
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"{what} lacks {', '.join(missing)}")
    for fields, may_be_null in ((required, False), (optional or {}, True)):
        for name, kind in fields.items():
            value: Any = data.get(name)
            if value is None and may_be_null:
                continue
            if not is_kind(value, kind):
                raise ValueError(f"{what} {name} must be a {kind}, got {type(value).__name__}")
