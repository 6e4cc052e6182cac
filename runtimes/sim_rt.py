"""Simulated devices: wait for the catalog's roofline time, with noise and optional drift.

A sim device is always ``simulated=True`` and its class is ``sim-<catalog name>`` (e.g.
``sim-h100``). It returns no output; its energy is modelled from the catalog device's published
idle and peak power over the simulated time (``models.devices.modelled_energy_j``; the record
says ``energy_simulated``), never measured. ``exec_ms`` is the wall time the simulated op occupied the
executor (the target is ``roofline x lognormal noise x drift``; sleeping gets within ~0.1 ms).

Drift schedules are ``"t0:f0,t1:f1,..."``: from ``t_i`` seconds after the runtime starts,
times are multiplied by ``f_i`` (piecewise constant; factor 1 before the first breakpoint).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from models.devices import DEVICE_CATALOG, modelled_energy_j, roofline_seconds
from models.ops import OpSpec, SpecError, Variant
from runtimes.base import Execution, Runtime, VariantRefused, contract_refusal

SPIN_S = 2e-4  # sleep() overshoots by ~50-100 us on Linux; spin the last 0.2 ms instead


def parse_drift(schedule: str | None) -> list[tuple[float, float]]:
    """``"0:1,30:4,60:1"`` -> sorted [(seconds, factor)]; raises SpecError when malformed."""
    if not schedule:
        return []
    points: list[tuple[float, float]] = []
    for part in schedule.split(","):
        at, sep, factor = part.strip().partition(":")
        try:
            point = (float(at), float(factor))
        except ValueError:
            point = (math.nan, math.nan)
        if not sep or not all(math.isfinite(v) for v in point) or point[0] < 0 or point[1] <= 0:
            raise SpecError(f"drift point {part!r} must be seconds:factor, factor > 0")
        points.append(point)
    return sorted(points)


def drift_factor(points: list[tuple[float, float]], elapsed_s: float) -> float:
    """The factor in force ``elapsed_s`` seconds after start."""
    factor = 1.0
    for at, f in points:
        if elapsed_s >= at:
            factor = f
    return factor


def sleep_precisely(seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Sleep most of ``seconds``, then spin the remainder for sub-millisecond accuracy."""
    deadline = clock() + seconds
    if seconds > SPIN_S:
        time.sleep(seconds - SPIN_S)
    while clock() < deadline:
        pass


class SimRuntime(Runtime):
    """A device from ``models.devices.DEVICE_CATALOG`` that only pretends to compute."""

    name = "sim"
    simulated = True

    def __init__(
        self,
        device: str = "h100",
        threads: int | None = None,
        drift: str | None = None,
        noise_sigma: float = 0.05,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = sleep_precisely,
    ) -> None:
        super().__init__()
        name = device.removeprefix("sim-")
        if name not in DEVICE_CATALOG:
            raise RuntimeError(f"no simulated device {device!r}; catalog: {sorted(DEVICE_CATALOG)}")
        self.spec = DEVICE_CATALOG[name]
        self.power_model = self.spec  # energy modelled from its published power
        self.device = name
        self.device_class = f"sim-{name}"
        self.drift = parse_drift(drift)
        self.noise_sigma = noise_sigma
        self.rng = np.random.default_rng(seed)
        self.clock = clock
        self.sleep = sleep
        self.started = clock()

    def refusal(self, kind: str, precision: str, mode: str) -> str | None:
        reason = contract_refusal(kind, precision, mode)
        if reason:
            return reason
        if not self.spec.supports(precision):
            return f"{self.spec.name} has no published {precision} rate"
        if mode == "compiled":
            return "the simulator models no compiler; only eager runs"
        return None

    def expected_seconds(self, spec: OpSpec, variant: Variant) -> float:
        """Roofline time times the drift factor now (no noise): what tests compare against."""
        factor = drift_factor(self.drift, self.clock() - self.started)
        return roofline_seconds(self.spec, spec, variant) * factor

    def execute(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Execution:
        """Sleep the simulated duration; inputs are ignored (the sim computes nothing)."""
        reason = self.refusal(spec.kind, variant.precision, variant.mode)
        if reason is not None:
            raise VariantRefused(reason)
        # Median-1 lognormal noise: multiplicative jitter, never negative.
        noise = float(self.rng.lognormal(0.0, self.noise_sigma)) if self.noise_sigma else 1.0
        target = self.expected_seconds(spec, variant) * noise
        start = time.perf_counter_ns()
        self.sleep(target)
        elapsed_ms = (time.perf_counter_ns() - start) / 1e6
        key = (spec.signature(), variant)
        warmup = key not in self._warm
        self._warm[key] = True
        # The energy of the simulated time itself: the wall time around the sleep also holds
        # this machine's scheduling jitter, which a 700 W device would turn into joules.
        return Execution(
            output=None, exec_ms=elapsed_ms, compile_ms=None, warmup=warmup,
            energy_j=modelled_energy_j(self.spec, target * 1e3), energy_simulated=True,
        )

    # The sim overrides execute(); the timing-loop hooks are never called.
    def _prepare(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Any:
        raise NotImplementedError

    def _build(self, spec: OpSpec, variant: Variant, args: Any) -> tuple[Any, float | None]:
        raise NotImplementedError

    def _sync(self, out: Any) -> None:
        raise NotImplementedError

    def _to_numpy(self, out: Any) -> np.ndarray:
        raise NotImplementedError
