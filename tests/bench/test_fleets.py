"""The scheduling benchmark's fleets: devices per executor process, the 120-device set."""

from __future__ import annotations

import pytest

from bench import fleets, fleetsim, scheduling
from bench.harness import ExecutorSpec


def test_devices_are_split_over_processes_of_at_most_per_process() -> None:
    assert ExecutorSpec("sim", "l4", 40, per_process=20).processes() == [20, 20]
    assert ExecutorSpec("sim", "l4", 36, per_process=20).processes() == [20, 16]
    assert ExecutorSpec("sim", "l4", 3).processes() == [1, 1, 1]
    assert ExecutorSpec("sim", "l4", 36, per_process=20).label() == "36x sim:l4 (2 processes)"
    assert ExecutorSpec("sim", "l4", 12, per_process=20).label() == "12x sim:l4 (1 process)"
    assert ExecutorSpec("sim", "l4", 3).label() == "3x sim:l4"


def test_the_120_device_set_is_the_fleet_simulations_large_fleet() -> None:
    assert fleets.fleet_classes(fleets.SIM_FLEET_120) == {
        f"sim-{device}": count for device, count in fleetsim.FLEETS["fleet120"].items()}
    assert sum(len(s.processes()) for s in fleets.SIM_FLEET_120) == 7


def test_a_fleet_faster_than_the_set_rate_is_slowed_and_each_device_gets_a_lane(tmp_path) -> None:
    device_set = scheduling.DeviceSet("sim120-fp32", "sim", ("fp32",),
                                      fleet=fleets.SIM_FLEET_120, sim_rate_per_s=300.0)
    prepared = scheduling.prepare(device_set, 2.0, tmp_path)
    assert prepared["rate_per_s"] == pytest.approx(300.0)
    assert prepared["time_scale"] > 5  # ~3,150/s at catalog speed
    assert prepared["route_partitions"] == 40  # the l4 class's 40 devices
    assert all(spec.drift == f"0:{prepared['time_scale']:.4f}" for spec in prepared["fleet"])
    plain = scheduling.prepare(scheduling.DeviceSet("sim-fp32", "sim", ("fp32",)), 2.0, tmp_path)
    assert plain["route_partitions"] == scheduling.DEFAULT_ROUTE_PARTITIONS


def test_the_static_class_is_judged_by_the_variant_static_runs_there() -> None:
    """Static runs a class's fp32 eager variant (models/decision.py::class_representatives):
    JAX's compiled variant tying torch made the live fp32 set's static always-JAX, which ran
    JAX eager (6.6-11.6 s mean against always-torch's ~0.1)."""
    from models.ops import Variant, parse_op
    from models.oracle import profile_key

    op = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64})

    def key(precision: str, mode: str) -> str:
        return profile_key(op, Variant(precision, mode))

    table = {"torch": {key("fp32", "eager"): 10.0},
             "jax": {key("fp32", "eager"): 40.0, key("fp32", "compiled"): 9.0},
             "sim": {key("fp32", "compiled"): 7.0, key("bf16", "compiled"): 5.0}}
    assert fleets.best_ms(table, op, ("fp32",)) == {"torch": 10.0, "jax": 9.0, "sim": 7.0}
    assert fleets.baseline_ms(table, op, ("fp32",)) == {"torch": 10.0, "jax": 40.0, "sim": 7.0}
    assert fleets.baseline_ms(table, op, ("fp32", "bf16"))["sim"] == 5.0
