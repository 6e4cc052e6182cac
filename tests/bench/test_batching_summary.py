"""The batching benchmark's arithmetic (bench/batching.py): throughput over the span from the
first route sent to the last outcome received, completion per workload, batch sizes."""

from __future__ import annotations

import pytest

from bench.batching import phase_summary


def test_phase_summary() -> None:
    run = {"sent": {"a": 1000.0, "b": 1000.0, "c": 1010.0},
           "received": {"a": 1100.0, "b": 1100.0, "c": 1500.0},
           "outcomes": {"a": {"status": "ok", "latency_ms": 8.0, "batch_size": 2},
                        "b": {"status": "ok", "latency_ms": 8.0, "batch_size": 2},
                        "c": {"status": "error", "latency_ms": 0.0}}}
    summary = phase_summary(run, total=4)
    assert summary["completed"] == 3 and summary["workloads"] == 4 and summary["errors"] == 1
    assert summary["throughput_per_s"] == pytest.approx(3 / 0.5)
    assert summary["completion_ms"]["p50"] == 100.0 and summary["completion_ms"]["max"] == 490.0
    assert summary["mean_batch_size"] == pytest.approx(5 / 3) and summary["max_batch_size"] == 2
    assert summary["exec_ms_per_workload"]["mean"] == 4.0
