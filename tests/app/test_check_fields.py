"""app/streaming.py::check_fields: the generated fast check accepts exactly what the full
check accepts, and a refused record still gets its precise reason."""

from __future__ import annotations

import gc
import math

import pytest

from app import loop
from app.streaming import check_fields

REQUIRED = {"name": "string", "ms": "number", "count": "integer", "op": "object",
            "shape": "list", "ok": "boolean"}
OPTIONAL = {"energy": "number", "note": "string"}
GOOD = {"name": "a", "ms": 1.5, "count": 3, "op": {}, "shape": [1], "ok": True}


@pytest.mark.parametrize("record", [
    GOOD,
    {**GOOD, "ms": 2},  # an integer is a number (the full check settles it)
    {**GOOD, "energy": None, "note": None},  # optional fields may be null
    {**GOOD, "energy": 0.5, "note": "x", "extra": object()},  # unknown fields are not checked
])
def test_accepted(record: dict) -> None:
    check_fields(record, "thing", REQUIRED, OPTIONAL)


@pytest.mark.parametrize(("record", "reason"), [
    ({k: v for k, v in GOOD.items() if k not in ("ms", "op")}, "thing lacks ms, op"),
    ({**GOOD, "ms": math.nan}, "thing ms must be a number, got float"),
    ({**GOOD, "ms": True}, "thing ms must be a number, got bool"),
    ({**GOOD, "ms": "1"}, "thing ms must be a number, got str"),
    ({**GOOD, "count": True}, "thing count must be a integer, got bool"),
    ({**GOOD, "count": 1.0}, "thing count must be a integer, got float"),
    ({**GOOD, "ok": 1}, "thing ok must be a boolean, got int"),
    ({**GOOD, "name": None}, "thing name must be a string, got NoneType"),
    ({**GOOD, "energy": math.inf}, "thing energy must be a number, got float"),
    ({**GOOD, "note": 3}, "thing note must be a string, got int"),
])
def test_refused_with_the_reason(record: dict, reason: str) -> None:
    with pytest.raises(ValueError) as refused:
        check_fields(record, "thing", REQUIRED, OPTIONAL)
    assert str(refused.value) == reason


def test_each_pair_of_field_dicts_gets_its_own_check() -> None:
    check_fields({"a": 1}, "x", {"a": "integer"})
    with pytest.raises(ValueError, match="x a must be a string"):
        check_fields({"a": 1}, "x", {"a": "string"})  # new dict, same shape: checked anew


def test_tune_gc_freezes_start_up_and_sets_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        loop.tune_gc(12_345)
        assert gc.get_threshold() == (12_345, before[1], before[2])
        assert gc.get_freeze_count() > 0
        loop.tune_gc(0)  # 0 keeps the thresholds as they are
        assert gc.get_threshold()[0] == 12_345
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
