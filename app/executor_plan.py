"""What an executor runs of a fetched batch of routes, and what it may then commit (pure logic).

A fetched batch is decoded and grouped (``Plan``: routes that share a batched call run
together, runtimes/work.py::plan); groups run out of fetch order, so ``committable`` gives each
partition's offset up to its first route not yet run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from app.settings import Settings
from models.workload import WorkloadLimits
from runtimes.work import Parsed


def limits_from(settings: Settings) -> WorkloadLimits:
    """The workload limits the settings configure."""
    return WorkloadLimits(
        max_elements=settings.max_elements,
        max_inline_elements=settings.max_inline_elements,
        max_message_bytes=settings.max_message_bytes,
        max_depth=settings.max_json_depth,
    )


@dataclass(frozen=True)
class Plan:
    """A fetched batch of routes, decoded, and the order to run them in: ``groups`` of
    indices, each one route or several that share a batched call (runtimes/work.py::plan)."""

    messages: list[Any]
    routes: list[dict[str, Any] | str]  # the decoded route, or why it is dead-lettered
    parsed: dict[int, Parsed]  # the routes whose workload and variant parsed
    groups: list[list[int]]


def committable(batch: list[tuple[TopicPartition, Any]], ran: set[int]) -> dict[
        TopicPartition, int]:
    """The offset to commit per partition once the routes at indices ``ran`` of ``batch``
    are published: up to the first route of the partition not yet run (batches run routes
    out of fetch order, and a commit past a route not yet run would lose it on a crash)."""
    offsets: dict[TopicPartition, int] = {}
    waiting: dict[TopicPartition, int] = {}
    for index, (tp, message) in enumerate(batch):
        if index in ran:
            offsets[tp] = max(offsets.get(tp, 0), message.offset + 1)
        else:
            waiting[tp] = min(waiting.get(tp, message.offset), message.offset)
    for tp, first_waiting in waiting.items():
        if tp in offsets:
            offsets[tp] = min(offsets[tp], first_waiting)
    return offsets
