"""Every hostile message is refused by its stage's parser with a reason, and nothing else:
no other exception (which would crash the agent) and no acceptance (which would let a
malformed record into the tables). Fast: no broker, the same messages the live test sends."""

from __future__ import annotations

from collections import Counter

import pytest

from agents.complete import parse_outcomes
from agents.learn import metric_row, parse_metric
from agents.registry import parse_heartbeat
from models.ops import SpecError
from models.workload import WorkloadLimits, decode_json_bounded, parse_workload
from tests.reliability.fuzz_inputs import Hostile, hostile_messages

LIMITS = WorkloadLimits()


def refusal(message: Hostile) -> str | None:
    """The reason the worker's stage gives for refusing ``message``; None when it accepts it."""
    try:
        if message.topic == "workloads":
            parse_workload(decode_json_bounded(message.value, LIMITS.max_message_bytes,
                                               LIMITS.max_depth), LIMITS)
        elif message.topic == "metrics":
            metric = parse_metric(message.value)
            if metric.status == "ok":
                metric_row(metric)  # learn refuses an op or variant it cannot learn from
        elif message.topic == "heartbeats":
            parse_heartbeat(message.value)
        else:
            good, refused = parse_outcomes(message.value)
            if not good:  # a batch whose every outcome was refused
                return refused[0][0]
    except (SpecError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    return None


@pytest.mark.parametrize("seed", [0, 1])
def test_every_hostile_message_is_refused_with_a_reason(seed: int) -> None:
    """1,500 messages per seed over the four input topics: all refused, none crash."""
    messages = hostile_messages(1500, seed)
    assert Counter(m.topic for m in messages).keys() == {"workloads", "metrics", "heartbeats",
                                                         "outcomes"}
    accepted = Counter(m.category for m in messages if refusal(m) is None)
    assert not accepted, f"accepted hostile messages by category: {dict(accepted)}"


def test_the_watcher_counts_every_hostile_outcomes_record_as_itself() -> None:
    """The suite's own reader of the outcomes topic (tests/reliability/watch.py) must not stop
    on what the worker dead-letters: a record it cannot decode is one (key, value) pair."""
    from tests.reliability.watch import per_outcome

    topic = "ns.switchyard.outcomes"
    for message in hostile_messages(1500, 3):
        if message.topic != "outcomes" or not message.value:
            continue
        pairs = per_outcome(topic, "k", message.value)
        assert pairs, message.category
    nested = b"[" * 100_000
    assert per_outcome(topic, "k", nested) == [("k", nested)]
