"""bench/executor_capacity.py's pure parts: the routes it sends and the section it writes."""

from __future__ import annotations

import json

from bench.executor_capacity import report_executor_capacity, route_bytes
from models.traces import synthetic_trace
from models.workload import WorkloadLimits
from runtimes import get_runtime
from runtimes.work import perform


def test_its_routes_are_ones_a_sim_executor_runs() -> None:
    runtime = get_runtime("sim", "h100")
    try:
        for workload in synthetic_trace(20, seed=3, id_prefix="t-"):
            route = json.loads(route_bytes(workload))
            result = perform(route, runtime, device_id="d", limits=WorkloadLimits())
            assert result.outcome["id"] == workload["id"]
            assert result.outcome["status"] == "ok", result.outcome
    finally:
        runtime.close()


def test_the_section_says_simulated_and_carries_the_figures() -> None:
    text = report_executor_capacity({
        "routes": 20000, "results": 20000, "seen_twice": 0, "warmup_results": 300,
        "device": "sim-h100", "executor_cpus": [1], "driver_cpus": [0],
        "produced_per_s": 19409.4, "rate_per_s": 3871.0, "all_done_s": 5.7,
        "cpu_us_per_route": 261.5, "mean_exec_us": 11.8, "measured_at": "2026-12-07 05:00 UTC"})
    assert "SIMULATED" in text and "20000/20000, 0 seen twice" in text
    assert "| 3871 | 5.7 | 262 | 12 |" in text
