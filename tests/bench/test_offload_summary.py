"""bench/offload.py's pure parts: the trace and one run's summary (no cluster)."""

from __future__ import annotations

import pytest

from bench import offload
from bench.harness import Run


def test_trace_mixes_small_and_large_ops_with_their_deadlines() -> None:
    workloads = offload.trace(200, seed=3, prefix="t", objective="cost")
    large = [w for w in workloads if w["deadline_ms"] == offload.LARGE_DEADLINE_MS]
    assert 0.2 < len(large) / 200 < 0.4 and all(w["objective"] == "cost" for w in workloads)
    assert all(w["op"] in offload.LARGE_OPS for w in large)
    assert offload.trace(5, 1, "a") == offload.trace(5, 1, "a")


def test_summary_counts_share_kept_local_deadlines_joules_cost_and_work_per_joule() -> None:
    small = {"id": "s", "op": offload.SMALL_OPS[0], "deadline_ms": offload.SMALL_DEADLINE_MS}
    big = {"id": "b", "op": offload.LARGE_OPS[1], "deadline_ms": offload.LARGE_DEADLINE_MS}
    run = Run(sent={"s": 0.0, "b": 0.0}, received={"s": 60.0, "b": 100.0},
              results={"s": {"status": "ok", "device_class": "sim-jetson-nano",
                             "latency_ms": 0.1, "energy_j": 0.5, "energy_simulated": True},
                       "b": {"status": "ok", "device_class": offload.REMOTE, "latency_ms": 0.3,
                             "transfer_ms": 35.7, "energy_j": 1.5,
                             "energy_simulated": True}})
    s = offload.summarise(run, [small, big])
    assert s["local_share"] == 0.5 and s["large_local_share"] == 0.0
    assert s["deadline_attainment"] == 0.5  # 60 ms > 50 ms; 100 ms <= 400 ms
    assert s["joules"] == 2.0 and s["energy_simulated"] and s["workloads_per_j"] == 1.0
    assert s["cost"] == pytest.approx(offload.PRICE_PER_HOUR * 36.0 / 3.6e6)
    flops = 2 * 64**3 + 2 * 2048**3
    assert s["flops_per_j"] == pytest.approx(flops / 2.0)
    assert s["per_class"][offload.REMOTE]["mean_transfer_ms"] == 35.7
    missing = Run(sent={"s": 0.0}, received={"s": 1.0},
                  results={"s": {"status": "ok", "device_class": "torch-cpu-x86",
                                 "latency_ms": 0.1, "energy_j": None}})
    assert offload.summarise(missing, [small])["joules"] is None  # never a partial sum


def test_merge_takes_medians_over_repeats_and_sums_classes() -> None:
    def one(share: float, mean: float) -> dict:
        stats = {"mean": mean, "p99": 2 * mean}
        return {"local_share": share, "large_local_share": share, "deadline_attainment": 1.0,
                "joules": 2.0, "cost": 0.0, "flops_per_j": 5.0, "workloads_per_j": 1.0,
                "completion_ms": stats, "small_completion_ms": stats,
                "large_completion_ms": stats, "ok": 2, "workloads": 2,
                "energy_simulated": True, "load_1min": [1.0, 2.0],
                "per_class": {"sim-h100": {"workloads": 2, "flops": 10.0, "joules": 2.0,
                                           "transfer_ms": 4.0}}}
    merged = offload.merge([one(0.5, 10.0), one(1.0, 30.0)])
    assert merged["local_share"] == 0.75 and merged["completion_ms"]["mean"] == 20.0
    assert merged["completion_ms"]["mean_range"] == [10.0, 30.0]
    assert merged["ok"] == 4 and merged["load_1min"] == [1.0, 2.0, 1.0, 2.0]
    h100 = merged["per_class"]["sim-h100"]
    assert h100["workloads"] == 4 and h100["flops_per_j"] == 5.0 and h100["mean_transfer_ms"] == 2
    assert offload.mean_cell(merged["completion_ms"]) == "20 (10–30)"
