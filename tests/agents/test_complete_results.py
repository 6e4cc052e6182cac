"""The result the complete stage publishes (agents/complete.py): an outcome is checked into a
plain row, and its result's bytes are what ``ResultRecord(**fields).dumps()`` writes — the
results topic's contract — without building the Faust record."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.complete import check_outcome, parse_outcomes, result_bytes
from app.records import ResultRecord, wire_fields

BASE: dict[str, Any] = {"id": "w1", "status": "ok", "device_id": "d1", "device_class": "c",
                        "variant": {"precision": "fp32", "mode": "eager"}, "latency_ms": 0.5,
                        "queue_ms": 2}


@pytest.mark.parametrize("change", [
    {},
    {"status": "error", "error": "boom", "checksum": None},
    {"energy_j": 1.25, "compile_ms": 30.0, "attempt": 2, "simulated": True,
     "decided_at_ms": 1_000, "finished_at_ms": 1_010, "submitted_at_ms": 999.5,
     "batch_size": 4, "transfer_ms": 0.75, "energy_simulated": True,
     "output": {"shape": [2, 2]}, "checksum": "sha256:" + "0" * 64},
    {"unknown_field": "dropped", "another": [1, 2]},
])
def test_result_bytes_are_the_result_records_own(change: dict[str, Any]) -> None:
    data = {**BASE, **change}
    assert result_bytes(check_outcome(data)) == ResultRecord.from_data(data).dumps()
    published = json.loads(result_bytes(check_outcome(data)))
    assert "unknown_field" not in published and published["id"] == "w1"


def test_every_result_field_is_carried_by_the_row() -> None:
    """The row keeps each field the record declares (a field without a kind the parser knows
    would fall back to its default in the result, silently)."""
    required, optional = wire_fields(ResultRecord)
    assert set(required) | set(optional) == set(ResultRecord._options.fields)
    row = check_outcome({**BASE, "batch_size": 3})
    assert vars(row).keys() == ResultRecord._options.fields.keys()
    assert row.batch_size == 3 and row.transfer_ms is None and row.attempt == 1


def test_a_field_set_after_checking_is_published() -> None:
    """The complete stage fills ``submitted_at_ms`` from the in-flight entry before writing."""
    row = check_outcome(dict(BASE))
    row.submitted_at_ms = 123.0
    assert json.loads(result_bytes(row))["submitted_at_ms"] == 123.0


def test_a_batch_of_outcomes_checks_each() -> None:
    batch = {"version": 2, "outcomes": [BASE, {**BASE, "id": "w2", "status": "maybe"}]}
    good, refused = parse_outcomes(json.dumps(batch).encode())
    assert [o.id for o in good] == ["w1"]
    assert len(refused) == 1 and "not ok|error" in refused[0][0]
