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
