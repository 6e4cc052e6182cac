"""Energy counters that are actually measured: RAPL on the CPU, NVML on NVIDIA GPUs.

Both are cumulative counters; a meter takes a raw :meth:`sample` before and after an execution
and :meth:`joules` turns the pair into joules, or None where the counter is unreadable. Nothing
here estimates: a machine without a readable counter reports None.

RAPL ``energy_uj`` counts package energy (all processes on that socket, not just ours) and
wraps at ``max_energy_range_uj``; its update interval is ~1 ms, so sub-millisecond ops read
mostly quantisation noise. NVML's total-energy counter (Volta and later) is in millijoules.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)
POWERCAP_ROOT = Path("/sys/class/powercap")


class EnergyMeter(Protocol):
    """A cumulative energy counter."""

    def sample(self) -> Any:
        """A raw reading, or None when unreadable."""

    def joules(self, before: Any, after: Any) -> float | None:
        """Energy between two samples, or None when either is unreadable."""


class NullMeter:
    """No readable counter: every answer is None."""

    def sample(self) -> None:
        return None

    def joules(self, before: Any, after: Any) -> float | None:
        return None


def wrapped_delta(before: int, after: int, max_range: int) -> int:
    """Counter difference allowing for one wraparound at ``max_range``."""
    if after >= before:
        return after - before
    return after + max_range - before


class RaplMeter:
    """Sum of the package-level RAPL domains under ``/sys/class/powercap``."""

    def __init__(self, root: Path = POWERCAP_ROOT) -> None:
        self.domains: list[tuple[Path, int]] = []
        for zone in sorted(root.glob("*-rapl:*")) if root.is_dir() else []:
            # Top-level zones (intel-rapl:0) are packages; intel-rapl:0:0 are sub-domains whose
            # energy the package already counts.
            if zone.name.count(":") != 1:
                continue
            try:
                max_range = int((zone / "max_energy_range_uj").read_text())
                int((zone / "energy_uj").read_text())  # readable? (root-only on many kernels)
            except (OSError, ValueError):
                continue
            self.domains.append((zone / "energy_uj", max_range))

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def sample(self) -> list[int] | None:
        if not self.domains:
            return None
        try:
            return [int(path.read_text()) for path, _ in self.domains]
        except (OSError, ValueError):
            return None

    def joules(self, before: list[int] | None, after: list[int] | None) -> float | None:
        if before is None or after is None:
            return None
        total_uj = sum(
            wrapped_delta(b, a, rng)
            for b, a, (_, rng) in zip(before, after, self.domains, strict=True)
        )
        return total_uj / 1e6


class NvmlMeter:
    """NVML total energy of one GPU (``nvmlDeviceGetTotalEnergyConsumption``, mJ)."""

    def __init__(self, index: int) -> None:
        self.handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self.handle = handle
            self._nvml = pynvml
        except Exception as exc:  # library missing, no driver, pre-Volta GPU: all mean "no counter"
            logger.info("NVML energy unavailable for GPU %d: %s", index, exc)

    @property
    def available(self) -> bool:
        return self.handle is not None

    def sample(self) -> int | None:
        if self.handle is None:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:
            return None

    def joules(self, before: int | None, after: int | None) -> float | None:
        if before is None or after is None:
            return None
        return (after - before) / 1e3

    def power_w(self) -> float | None:
        """Instantaneous board power (``nvmlDeviceGetPowerUsage``, mW), for heartbeats."""
        if self.handle is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetPowerUsage(self.handle)) / 1e3
        except Exception:
            return None

    def memory(self) -> tuple[int, int] | None:
        """(used, total) device memory in bytes."""
        if self.handle is None:
            return None
        try:
            info = self._nvml.nvmlDeviceGetMemoryInfo(self.handle)
            return int(info.used), int(info.total)
        except Exception:
            return None


def nvml_index(cuda_index: int) -> int:
    """NVML numbers all GPUs; CUDA only the visible ones. Map through CUDA_VISIBLE_DEVICES."""
    import os

    visible = [
        v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()
    ]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index


def meter_for(device: str) -> EnergyMeter:
    """The measuring meter for a device string (``cpu`` -> RAPL, ``cuda:N`` -> NVML)."""
    if device.startswith(("cuda", "gpu")):
        nvml = NvmlMeter(nvml_index(int(device.split(":", 1)[1]) if ":" in device else 0))
        return nvml if nvml.available else NullMeter()
    if device == "cpu":
        rapl = RaplMeter()
        return rapl if rapl.available else NullMeter()
    return NullMeter()


class PowerTracker:
    """Average power between successive calls, from any meter (heartbeat ``power_w``)."""

    def __init__(self, meter: EnergyMeter, clock: Any = None) -> None:
        import time

        self.meter = meter
        self.clock = clock or time.monotonic
        self._last = (meter.sample(), self.clock())

    def power_w(self) -> float | None:
        sample, now = self.meter.sample(), self.clock()
        last_sample, last_time = self._last
        self._last = (sample, now)
        joules = self.meter.joules(last_sample, sample)
        if joules is None or now <= last_time:
            return None
        return joules / (now - last_time)
