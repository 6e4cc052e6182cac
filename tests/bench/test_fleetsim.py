"""The fleet simulation (bench/fleetsim.py): a discrete-event run of the worker's policies."""

from __future__ import annotations

import pytest

from bench import fleetsim
from models.workload import WorkloadLimits, parse_workload


@pytest.fixture(scope="module")
def small() -> tuple[dict, list]:
    prepared = fleetsim.prepare(fleetsim.SimSet("fleet10", ("fp32", "bf16"), 0.7), 300)
    parsed = [parse_workload(w, WorkloadLimits()) for w in prepared["workloads"]]
    return prepared, parsed


def _run(small: tuple[dict, list], policy: str) -> tuple[fleetsim.FleetSim, dict]:
    prepared, parsed = small
    sim = fleetsim.FleetSim(prepared, fleetsim.make(policy, prepared))
    return sim, sim.run(parsed)


def test_every_workload_runs_once_no_sooner_than_it_arrives_on_a_class_that_offers_it(small):
    prepared, parsed = small
    sim, stats = _run(small, "switchyard")
    assert stats["completed"] == len(parsed)
    assert not any(queue for lanes in sim.lanes.values() for queue, _ in lanes)
    arrivals = prepared["arrivals_ms"]
    assert (sim.start >= arrivals).all() and (sim.end > sim.start).all()
    for workload, decision in zip(parsed, sim.decision, strict=True):
        capabilities = prepared["classes"][decision.device_class].capabilities
        assert (workload.op.kind, decision.variant.precision, "eager") in capabilities
        assert decision.variant.precision in workload.precisions
    # Every device is free again and nothing is left charged to any class.
    assert {c: sum(free[0] for _, free in lanes) for c, lanes in sim.lanes.items()} == \
        prepared["counts"]
    assert all(sim.backlog.ms(c) < 1e-6 for c in prepared["counts"])


def _peak(sim: fleetsim.FleetSim, chosen: list[int]) -> int:
    edges = sorted([(sim.end[i], -1) for i in chosen] + [(sim.start[i], 1) for i in chosen])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.parametrize("within", fleetsim.WITHIN)
def test_a_device_runs_one_workload_at_a_time(small, within):
    prepared, parsed = small
    sim = fleetsim.FleetSim(prepared, fleetsim.make("jsq", prepared), within=within)
    sim.run(parsed)
    for device_class, devices in prepared["counts"].items():
        mine = [i for i, d in enumerate(sim.decision) if d.device_class == device_class]
        assert _peak(sim, mine) <= devices
        lanes = {int(sim.lane_of[i]) for i in mine}
        assert lanes <= set(range(devices if within != "shared" else 1))
        if within != "shared":  # each device its own FIFO: one at a time, in arrival order
            for lane in lanes:
                on_lane = [i for i in mine if sim.lane_of[i] == lane]
                assert _peak(sim, on_lane) == 1
                assert list(sim.start[on_lane]) == sorted(sim.start[on_lane])


def test_the_least_loaded_device_waits_less_than_the_hashed_one(small):
    prepared, parsed = small
    mean_queue = {within: fleetsim.FleetSim(prepared, fleetsim.make("jsq", prepared),
                                            within=within).run(parsed)["queue_ms"]["mean"]
                  for within in fleetsim.WITHIN}
    assert mean_queue["shared"] <= mean_queue["least"] < mean_queue["hash"]


def test_the_oracle_beats_round_robin_and_runs_are_reproducible(small):
    _, oracle = _run(small, "oracle")
    _, rr = _run(small, "round_robin")
    assert oracle["completion_ms"]["mean"] < rr["completion_ms"]["mean"]
    _, again = _run(small, "oracle")
    assert again["completion_ms"] == oracle["completion_ms"]


def test_switchyard_learns_the_fleet(small):
    sim, stats = _run(small, "switchyard")
    assert sum(m.samples for m in sim.models.values()) == stats["completed"]
    # bf16 is allowed and the sim H100's bf16 rate is 15x its fp32: learned, it is chosen.
    assert stats["variants"].get("bf16/eager", 0.0) > 0.5


def test_the_verdict_names_the_best_baseline_and_the_ratios() -> None:
    def policy(mean: float, p99: float) -> dict:
        return {"completion_ms": {"mean": mean, "p99": p99}}
    data = {"policies": {"switchyard": policy(10, 30), "oracle": policy(9, 25),
                         **{p: policy(20, 40) for p in fleetsim.BASELINES},
                         "jsq": policy(12, 20)}}
    v = fleetsim.verdict(data)
    assert v["best_baseline"] == "jsq"
    assert v["vs_oracle"] == pytest.approx(10 / 9)
    assert v["vs_best_baseline"] == pytest.approx(10 / 12)
    assert v["p99_vs_best_baseline"] == pytest.approx(30 / 20)


def test_a_calibrated_dmda_never_calibrates_during_the_trace(small):
    prepared, parsed = small
    sim = fleetsim.FleetSim(prepared, fleetsim.make(fleetsim.CALIBRATED_DMDA, prepared))
    sim.calibrate(parsed, 10)
    calibrated = sim.run(parsed)
    assert {d.reason for d in sim.decision} == {"exploit"}
    _, uncalibrated = _run(small, "dmda")
    assert calibrated["completion_ms"]["mean"] < uncalibrated["completion_ms"]["mean"]
