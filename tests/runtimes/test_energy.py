"""Energy meters: RAPL from a fake powercap tree, NVML absent here, nothing estimated."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtimes.energy import (
    NullMeter,
    NvmlMeter,
    PowerTracker,
    RaplMeter,
    meter_for,
    nvml_index,
    wrapped_delta,
)


def zone(root: Path, name: str, energy: int, max_range: int = 1_000_000) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "energy_uj").write_text(f"{energy}\n")
    (z / "max_energy_range_uj").write_text(f"{max_range}\n")
    return z


def test_wrapped_delta() -> None:
    assert wrapped_delta(100, 250, 1000) == 150
    assert wrapped_delta(900, 50, 1000) == 150


def test_rapl_sums_packages_and_handles_wraparound(tmp_path: Path) -> None:
    p0 = zone(tmp_path, "intel-rapl:0", 999_000)
    p1 = zone(tmp_path, "intel-rapl:1", 10)
    zone(tmp_path, "intel-rapl:0:0", 5)  # a sub-domain: counted inside package 0 already
    meter = RaplMeter(tmp_path)
    assert meter.available and len(meter.domains) == 2
    before = meter.sample()
    (p0 / "energy_uj").write_text("1000\n")  # wrapped past 1_000_000
    (p1 / "energy_uj").write_text("500010\n")
    assert meter.joules(before, meter.sample()) == pytest.approx((2_000 + 500_000) / 1e6)


def test_unreadable_rapl_reports_none(tmp_path: Path) -> None:
    z = zone(tmp_path, "intel-rapl:0", 1)
    (z / "energy_uj").write_text("garbage")
    meter = RaplMeter(tmp_path)
    assert not meter.available and meter.sample() is None
    assert meter.joules(None, None) is None
    assert not RaplMeter(tmp_path / "missing").available


def test_nvml_without_a_gpu_is_unavailable() -> None:
    meter = NvmlMeter(99)
    assert not meter.available
    assert meter.sample() is None and meter.joules(None, None) is None
    assert meter.power_w() is None and meter.memory() is None


def test_meter_for_never_estimates() -> None:
    for device in ("cpu", "cuda:0", "tpu:0", "h100"):
        meter = meter_for(device)
        joules = meter.joules(meter.sample(), meter.sample())
        assert joules is None or joules >= 0
    assert isinstance(meter_for("h100"), NullMeter)


def test_nvml_index_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert nvml_index(0) == 3 and nvml_index(1) == 1 and nvml_index(2) == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_index(1) == 1


def test_power_tracker_averages_between_calls(tmp_path: Path) -> None:
    z = zone(tmp_path, "intel-rapl:0", 0, max_range=10**12)
    now = [100.0]
    tracker = PowerTracker(RaplMeter(tmp_path), clock=lambda: now[0])
    (z / "energy_uj").write_text(str(30_000_000))  # 30 J
    now[0] = 102.0
    assert tracker.power_w() == pytest.approx(15.0)
    assert PowerTracker(NullMeter()).power_w() is None
