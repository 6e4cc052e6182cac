"""A set's warm-up run (bench/scheduling.py::run_set): run first, never kept, live and
simulated sets alike (a simulated set's first run on a freshly started broker was its
policy's slowest, as a live set's first run after its profile was).

The cluster runs are faked (this tests the benchmark's bookkeeping, not a cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import scheduling
from bench.scheduling import DeviceSet


@pytest.mark.parametrize("kind", ["live", "sim"])
def test_a_set_warms_up_once_and_keeps_only_the_measured_runs(
        kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    prepared = {"capacity_per_s": 10.0, "rate_per_s": 4.0, "time_scale": 1.0,
                "static_class": "torch-cpu-x86", "sim_rate_per_s": None, "route_partitions": 1,
                "load": 0.4, "workloads": [{"id": "w0"}], "arrivals": [0.0, 2.0],
                "fleet": []}
    monkeypatch.setattr(scheduling, "prepare", lambda *args: prepared)
    calls: list[str] = []
    means = iter([900.0, 100.0, 300.0, 200.0, 400.0, 150.0])

    def run_policy(device_set: DeviceSet, prep: dict[str, Any], policy: str,
                   drain_s: float) -> dict[str, Any]:
        calls.append(policy)
        mean = next(means)
        return {"completion_ms": {"mean": mean, "p95": mean, "p99": mean}}

    monkeypatch.setattr(scheduling, "run_policy", run_policy)
    out = scheduling.run_set(DeviceSet("a-set", kind, ("fp32",)), 2.0, 1.0, tmp_path,
                             ("switchyard", "jsq"), repeats=2)
    # the warm-up (900 ms) first, then switchyard and jsq twice, interleaved
    assert calls == ["switchyard", "switchyard", "jsq", "switchyard", "jsq"]
    assert out["warm_up"]["policy"] == "switchyard" and out["warm_up"]["mean_ms"] == 900.0
    assert out["policies"]["switchyard"]["runs_mean_ms"] == [100.0, 200.0]
    assert out["policies"]["jsq"]["runs_mean_ms"] == [300.0, 400.0]
