"""Pure statistics of the benchmarks: capacity, adaptation times, offset slopes."""

from __future__ import annotations

import numpy as np
import pytest

from bench.drift import adaptation_times, share_over_time
from bench.fleets import best_ms, fluid_capacity
from bench.harness import Run
from bench.pipeline import slope
from models.ops import Variant, parse_op
from models.oracle import profile_key


def test_fluid_capacity_of_one_class_is_servers_over_mean_time() -> None:
    # Two op types, 10 ms and 30 ms, equally likely, on 2 servers: 2 / 20 ms = 100/s.
    assert fluid_capacity([1, 1], [{"a": 10.0}, {"a": 30.0}], {"a": 2}) == pytest.approx(100)


def test_fluid_capacity_splits_op_types_over_specialised_classes() -> None:
    # Each class is fast at one op type: perfect specialisation gives 1 / 1 ms each way.
    times = [{"a": 1.0, "b": 100.0}, {"a": 100.0, "b": 1.0}]
    assert fluid_capacity([1, 1], times, {"a": 1, "b": 1}) == pytest.approx(2000)


def test_best_ms_respects_allowed_precisions() -> None:
    op = parse_op({"kind": "matmul", "m": 8, "k": 8, "n": 8, "dtype": "float32"})
    table = {"c": {profile_key(op, Variant("fp32")): 4.0, profile_key(op, Variant("bf16")): 1.0}}
    assert best_ms(table, op, ("fp32",)) == {"c": 4.0}
    assert best_ms(table, op, ("fp32", "bf16")) == {"c": 1.0}


def test_share_over_time_bins_decisions() -> None:
    centres, share = share_over_time([0, 500, 2500, 2600, 2700], [1, 0, 1, 1, 0], 0.0, 2.0)
    assert centres[:2].tolist() == [1.0, 3.0]
    assert share[:2] == pytest.approx([0.5, 2 / 3])


def test_adaptation_times_find_move_and_return() -> None:
    centres = np.arange(1.0, 40.0, 2.0)  # bins [0,2), [2,4), ...
    share = np.where((centres > 10) & (centres < 30), 0.05, 0.6)
    share[centres == 11.0] = 0.4  # one bin to adapt
    times = adaptation_times(centres, share, onset_s=10.0, recovery_s=28.0)
    assert times["baseline_share"] == pytest.approx(0.6)
    assert times["moved_s"] == pytest.approx(4.0)  # the [12, 14) bin is the first low one
    assert times["returned_s"] == pytest.approx(4.0)  # [30, 32) is the first high one after 28


def test_adaptation_times_tell_halving_from_a_floor_above_the_moved_line() -> None:
    """A class that loses half its share at once and then keeps a floor just above 20 % of
    it: *halved* is immediate, *moved* waits for a noisy dip, the settled share is the floor."""
    centres = np.arange(1.0, 60.0, 2.0)
    share = np.where((centres > 20) & (centres < 50), 0.13, 0.6)
    share[centres == 41.0] = 0.1  # one dip under 0.12, 20 s after the onset
    times = adaptation_times(centres, share, onset_s=20.0, recovery_s=50.0)
    assert times["halved_s"] == pytest.approx(2.0)
    assert times["moved_s"] == pytest.approx(22.0)
    assert times["slowed_share"] == pytest.approx(0.13)


def test_adaptation_times_report_none_when_nothing_moved() -> None:
    centres = np.arange(1.0, 20.0, 2.0)
    times = adaptation_times(centres, np.full(centres.size, 0.5), 8.0, 14.0)
    assert times["moved_s"] is None and times["returned_s"] == pytest.approx(2.0)


def test_slope_between_thresholds() -> None:
    samples = [(0.0, 0), (1.0, 100), (2.0, 300), (3.0, 500), (4.0, 1000)]
    assert slope(samples, 100, 500) == pytest.approx(200.0)
    assert slope(samples, 100, 5000) is None


def test_metric_records_carry_every_row_once_in_records_of_one_class() -> None:
    """The pipeline bench's batch form: records of one class, up to N rows, nothing lost."""
    import orjson

    from app.records import metric_count, metric_rows
    from bench.pipeline import metric_records

    for per_record, form in ((1, "objects"), (64, "objects"), (64, "columns")):
        records = metric_records(1000, per_record, form)
        ids = []
        for device_class, value, rows in records:
            decoded = metric_rows(orjson.loads(value))
            assert len(decoded) == rows <= per_record
            assert metric_count(orjson.loads(value)) == rows
            assert {row["device_class"] for row in decoded} == {device_class}
            ids += [row["workload_id"] for row in decoded]
        assert sorted(ids) == sorted(f"m{i}" for i in range(1000))
        assert (per_record == 1) == all(b'"version"' not in v for _, v, _ in records)
        if per_record > 1:
            version = 3 if form == "columns" else 2
            assert all(orjson.loads(v)["version"] == version for _, v, _ in records)


def test_median_run_keeps_the_middle_run_and_lists_every_mean() -> None:
    from bench.scheduling import median_run

    runs = [{"completion_ms": {"mean": m}, "tag": t} for m, t in ((300.0, "a"), (100.0, "b"),
                                                                  (200.0, "c"))]
    kept = median_run(runs)
    assert kept["tag"] == "c" and kept["runs_mean_ms"] == [300.0, 100.0, 200.0]
    # A failed run sorts as the slowest; one run is kept as it is.
    assert median_run([{"error": "x"}, runs[1]])["tag"] == "b"
    assert "runs_mean_ms" not in median_run([runs[0]])


def _steady_run(completions_ms: list[float], gap_ms: float = 10.0) -> Run:
    run = Run(started_ms=0.0)
    for i, completion in enumerate(completions_ms):
        run.sent[f"w{i}"] = i * gap_ms
        run.received[f"w{i}"] = i * gap_ms + completion
    run.last_sent_ms = (len(completions_ms) - 1) * gap_ms
    return run


def test_sustained_load_rate_is_the_results_slope_between_10_and_90_percent() -> None:
    from bench.sustained import received_rate

    # 1,000 results 10 ms apart: 100/s whatever the (constant) completion time.
    assert received_rate(_steady_run([5.0] * 1000)) == pytest.approx(100.0)
    assert received_rate(_steady_run([5.0] * 5)) is None


def test_a_pipeline_falling_behind_shows_a_longer_completion_at_the_end() -> None:
    from bench.sustained import edge_completions

    # Completion grows by 1 ms per workload: the backlog grows over the load.
    first, last = edge_completions(_steady_run([float(i) for i in range(1000)]), 1.0)
    assert first["n"] == last["n"] == 101
    assert first["p50"] == pytest.approx(50.0) and last["p50"] == pytest.approx(949.0)


def test_sustained_report_says_when_it_did_not_keep_up() -> None:
    from bench.common import summarize
    from bench.sustained import report_sustained

    result = {"fleet": ["2x sim:h100"], "offered_per_s": 1000.0, "seconds": 60.0,
              "workloads": 60000, "sent_per_s": 998.0, "results": 59990, "missing": 10,
              "drain_s": 120.0,
              "duplicated": 0, "results_per_s": 990.0, "kept_up": False,
              "completion_ms": summarize([10.0, 20.0]), "completion_first_ms": summarize([10.0]),
              "completion_last_ms": summarize([900.0]),
              "decision_latency_ms": summarize([1.0, 2.0]),
              "cpu_share": {"worker": 0.5, "executors": 0.4, "broker": 0.3,
                            "load generator": 0.2}}
    text = report_sustained(result)
    assert "did **not** keep up" in text and "10 workloads had no result 120 s after" in text
    assert "| 59990/60000 | 10 | 0 | 990 |" in text
    assert "lingering" not in text  # a result from before the client's linger was recorded
    result["client_linger_ms"] = 5
    assert "its producer lingering 5 ms as the client's (app/submit.py) does" in report_sustained(
        result)
