"""Helpers shared by the agents: event context for batched table writes, dead letters, time."""

from __future__ import annotations

import base64
import contextlib
import logging
import time
import weakref
from collections.abc import Iterator
from typing import Any

from faust.streams import _current_event

from app import observability
from app.main import topics
from app.records import DeadLetterRecord

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
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def _key_text(key: Any) -> str | None:
    if key is None:
        return None
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="replace")[:512]
    return str(key)[:512]


async def dead_letter(stage: str, event: Any, reason: str) -> None:
    """Send the event's original bytes to switchyard.deadletter with the reason; count it."""
    message = event.message
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
