"""The web view's table-to-JSON functions (app.webviews) and the dashboard's static files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from app import webviews
from models.costmodel import CostModel
from models.ops import Variant, parse_op
from models.setup import update_setup
from models.sketch import WindowStats

STATIC = Path(__file__).resolve().parents[2] / "app" / "static"
NOW = 1_800_000_000_000


def device(device_id: str, device_class: str, seen_ms_ago: int, **extra: object) -> dict:
    return {"device_id": device_id, "device_class": device_class, "runtime": "numpy",
            "device": "cpu", "capabilities": [["matmul", "fp32", "eager"]], "queue_depth": 0,
            "last_seen_ms": NOW - seen_ms_ago, **extra}


# --- devices ------------------------------------------------------------------------------
@pytest.mark.parametrize(("seen_ms_ago", "state", "health"), [
    (100, "up", "ok"), (2_500, "up", "late"), (5_000, "up", "dead"), (100, "stopping", "stopped"),
])
def test_device_health(seen_ms_ago: int, state: str, health: str) -> None:
    got = webviews.device_health(device("d", "c-x", seen_ms_ago, state=state), NOW, 1.0, 5.0)
    assert got == health


def test_device_without_a_heartbeat_time_is_dead() -> None:
    assert webviews.device_health({"device_id": "d"}, NOW, 1.0, 5.0) == "dead"


def test_device_rows_keep_dead_devices_sorted_by_class() -> None:
    rows = webviews.device_rows(
        [device("b1", "b-cpu", 100), None, device("a1", "a-cpu", 60_000)], NOW, 1.0, 5.0)
    assert [r["device_id"] for r in rows] == ["a1", "b1"]
    assert [(r["live"], r["health"]) for r in rows] == [(False, "dead"), (True, "ok")]
    assert rows[0]["seen_ms_ago"] == 60_000
    assert rows[1]["capability_count"] == 1


# --- models -------------------------------------------------------------------------------------
def learned_model(rows: int) -> CostModel:
    model = CostModel.for_class("numpy-cpu-x86")
    rng = np.random.default_rng(0)
    batch = []
    for i in range(rows):
        size = int(rng.integers(16, 256))
        op = parse_op({"kind": "matmul", "m": size, "k": size, "n": size})
        batch.append((op, Variant("fp32"), 1e-6 * size**3 * (1 + 0.05 * (i % 3)), None))
    model.learn_many(batch)
    return model


def test_model_summary_of_a_cold_model() -> None:
    stored = json.loads(json.dumps(CostModel.for_class("numpy-cpu-x86").to_dict()))
    summary = webviews.model_summary("numpy-cpu-x86", stored)
    assert summary["samples"] == 0 and summary["version"] == 0
    assert summary["error_ratio"] is None
    assert set(summary["coefficients"]) == set(webviews.KEY_FEATURES)
    bias = summary["coefficients"]["bias"]
    assert bias["mean"] == pytest.approx(bias["prior_mean"])
    assert summary["uncertainty"]["learned_fraction"] == pytest.approx(0.0, abs=1e-9)
    assert summary["setup_ms"] == {}  # no first run measured yet
    json.dumps(summary, allow_nan=False)  # JSON without NaN


def test_model_summary_shows_the_learned_setup_of_new_shapes() -> None:
    stored = {**CostModel.for_class("jax-cpu-x86").to_dict(),
              "setup": update_setup(None, [("matmul", "compiled", 140.0, 1.0)])}
    summary = webviews.model_summary("jax-cpu-x86", json.loads(json.dumps(stored)))
    assert summary["setup_ms"] == {"compiled": 140.0, "matmul/compiled": 140.0}
    assert summary["transfer"] is None  # a local class: nothing measured over a link


def test_model_summary_shows_the_measured_transfer_line() -> None:
    from models.transfer import update_transfer

    rows = [(mb * 1e6, 20.0 + 8.0 * mb) for mb in (1, 2, 4, 8) * 5]
    stored = {**CostModel.for_class("sim-h100").to_dict(), "transfer": update_transfer(None, rows)}
    summary = webviews.model_summary("sim-h100", json.loads(json.dumps(stored)))
    assert summary["transfer"]["rows"] == 20 and summary["transfer"]["last_ms"] == 84.0
    assert summary["transfer"]["a_ms"] == pytest.approx(20.0, abs=0.5)
    assert summary["transfer"]["b_ms_per_mb"] == pytest.approx(8.0, rel=0.02)


def test_model_summary_after_learning() -> None:
    model = learned_model(200)
    summary = webviews.model_summary("numpy-cpu-x86", model.to_dict())
    assert summary["samples"] == 200
    assert summary["version"] == model.version
    median = model.error_summary()["median_ape"]
    # The stored error figures keep four significant digits.
    assert summary["error_ratio"] == pytest.approx(median / 100.0, rel=1e-3)
    assert summary["uncertainty"]["learned_fraction"] > 0.05
    shifts = [s["shift_prior_std"] for s in summary["largest_shifts"]]
    assert shifts == sorted(shifts, reverse=True) and len(shifts) == webviews.TOP_SHIFTS
    # Time grows with FLOPs here, so the fitted weights cannot all sit at their prior.
    assert shifts[0] > 0.1


# --- windows ------------------------------------------------------------------------------------
def stats(latencies: list[float], errors: int = 0) -> dict:
    s = WindowStats()
    s.add_batch(latencies, errors=errors)
    return s.to_dict()


def test_latest_windows_keeps_the_newest_per_class_and_kind() -> None:
    items = [
        (("a-cpu|matmul", (0.0, 9.9)), stats([1.0])),
        (("a-cpu|matmul", (10.0, 19.9)), stats([2.0] * 50 + [4.0] * 50)),
        (("a-cpu|softmax", (0.0, 9.9)), stats([3.0])),
        ("not-a-window-key", stats([5.0])),
        (("a-cpu|mlp", (0.0, 9.9)), {}),
    ]
    rows = webviews.latest_windows("tumbling", items)
    assert [(r["op_kind"], r["start"], r["count"]) for r in rows] == [
        ("matmul", 10.0, 100), ("softmax", 0.0, 1)]
    assert rows[0]["p99_ms"] == pytest.approx(4.0, rel=0.02)


def test_class_window_series_merges_op_kinds_of_one_window() -> None:
    items = [
        (("a-cpu|matmul", (0.0, 9.9)), stats([1.0] * 90)),
        (("a-cpu|softmax", (0.0, 9.9)), stats([100.0] * 10, errors=1)),
        (("a-cpu|matmul", (10.0, 19.9)), stats([2.0])),
        (("b-gpu|matmul", (10.0, 19.9)), stats([0.5, 0.5])),
    ]
    series = webviews.class_window_series(items, window_s=10.0)
    assert list(series) == ["a-cpu", "b-gpu"]
    first, second = series["a-cpu"]
    assert (first["t"], first["count"], first["errors"]) == (0.0, 101, 1)
    assert first["per_s"] == pytest.approx(10.1)
    assert first["p50_ms"] == pytest.approx(1.0, rel=0.02)
    assert first["p99_ms"] == pytest.approx(100.0, rel=0.02)  # the merged tail, not a mean
    assert second["t"] == 10.0 and series["b-gpu"][0]["count"] == 2


# --- decisions -----------------------------------------------------------------------------------
def decision(i: int, device_class: str, at_ms: int, predicted: float,
             measured: float | None) -> dict:
    return {"id": f"w{i}", "device_class": device_class, "decided_at_ms": at_ms,
            "predicted_ms": predicted, "measured_ms": measured}


def test_recent_decisions_sort_newest_first_and_skip_empty() -> None:
    items = [decision(0, "a", 100, 1, 1), decision(1, "a", 300, 1, None),
             decision(2, "b", 200, 1, 2), None]
    assert [d["id"] for d in webviews.recent_decisions(items, 2)] == ["w1", "w2"]


@pytest.mark.parametrize(("predicted", "measured", "expected"), [
    (1.5, 1.0, 50.0), (0.5, 1.0, 50.0), (1.0, None, None), (1.0, 0.0, None), ("x", 1.0, None),
])
def test_abs_pct_error(predicted: object, measured: object, expected: float | None) -> None:
    assert webviews.abs_pct_error(predicted, measured) == expected


def test_decision_series_share_and_error_per_bucket() -> None:
    decisions = [
        decision(0, "a", 1_000, 2.0, 1.0),   # bucket 0: a 100 % error
        decision(1, "a", 2_000, 1.0, 1.0),   # bucket 0: a 0 % error
        decision(2, "b", 3_000, 1.0, None),  # bucket 0: b not measured yet
        decision(3, "b", 6_000, 3.0, 2.0),   # bucket 5000: b 50 % error
    ]
    series = webviews.decision_series(decisions, bucket_ms=5_000)
    assert series["t"] == [0.0, 5.0]
    assert series["classes"] == ["a", "b"]
    assert series["count"] == {"a": [2, 0], "b": [1, 1]}
    assert series["share"]["a"][0] == pytest.approx(200 / 3)
    for i in range(2):
        assert sum(series["share"][c][i] for c in series["classes"]) == pytest.approx(100.0)
    assert series["error_pct"]["a"] == [pytest.approx(50.0), None]
    assert series["error_pct"]["b"] == [None, pytest.approx(50.0)]
    assert series["measured_ms"]["b"] == [None, 2.0]


def test_decision_error_by_class() -> None:
    out = webviews.decision_error_by_class([decision(0, "a", 0, 2.0, 1.0),
                                            decision(1, "a", 0, 1.0, None)])
    assert out == {"a": {"decisions": 2, "completed": 1, "predicted_ms_p50": 2.0,
                         "measured_ms_p50": 1.0, "error_pct_p50": 100.0}}


# --- static files ----------------------------------------------------------------------------------
def test_dashboard_loads_nothing_from_the_network() -> None:
    html = (STATIC / "index.html").read_text()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources, "the page references its assets"
    for source in sources:
        assert source.startswith(("/static/", "data:")), source
        if source.startswith("/static/"):
            assert (STATIC / source.removeprefix("/static/")).is_file(), source
    assert "http://" not in (STATIC / "dashboard.js").read_text()
    assert "https://" not in (STATIC / "dashboard.js").read_text()


def test_vendored_chart_library_carries_its_license() -> None:
    head = (STATIC / "uPlot.iife.min.js").read_text()[:400]
    assert "uPlot" in head and "MIT" in head
    assert "Permission is hereby granted" in (STATIC / "uPlot.LICENSE").read_text()


def test_dashboard_script_never_writes_api_text_as_html() -> None:
    # Device ids and op kinds come from Kafka: they must go in as text, not markup.
    assert "innerHTML" not in (STATIC / "dashboard.js").read_text()
