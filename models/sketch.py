"""Mergeable latency sketch and per-window statistics for the window stage.

`LatencySketch` is a DDSketch-style log-bucketed histogram: a value ``x`` falls in bucket
``ceil(log_gamma(x))`` with ``gamma = (1 + alpha) / (1 - alpha)``, and every quantile it
returns is within relative error ``alpha`` of the true one (Masson et al., VLDB 2019).
Sketches merge exactly by adding bucket counts, so per-batch sketches built in NumPy can be
folded into a windowed table entry once per batch, and hopping windows can be assembled from
tumbling ones.

`WindowStats` is what one windowed table entry (device class, op kind, window) holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["LatencySketch", "WindowStats"]

# 1% relative accuracy: tail latency (p99) is reported to two significant digits, and the
# bucket count for the whole range of interest (1 µs .. 1 h in ms) stays near 1,100.
DEFAULT_ALPHA = 0.01
# Bounded memory: beyond this many buckets the lowest ones are collapsed together, which keeps
# the upper quantiles (the tail we care about) exact to alpha. 2,048 covers 1e-9..1e9 at 1%.
DEFAULT_MAX_BUCKETS = 2048
# Values at or below this (ms) go to the zero bucket: they are below any clock's resolution.
MIN_INDEXABLE = 1e-9


@dataclass
class LatencySketch:
    """A DDSketch-like quantile sketch for non-negative values (latencies in ms)."""

    alpha: float = DEFAULT_ALPHA
    max_buckets: int = DEFAULT_MAX_BUCKETS
    buckets: dict[int, int] = field(default_factory=dict)
    zero_count: int = 0
    count: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.max_buckets < 2:
            raise ValueError("max_buckets must be at least 2")
        self._gamma = (1.0 + self.alpha) / (1.0 - self.alpha)
        self._log_gamma = math.log(self._gamma)

    # -- updates ---------------------------------------------------------------------------
    def add(self, x: float) -> None:
        """Add one value (must be finite and >= 0)."""
        x = float(x)
        if not math.isfinite(x) or x < 0.0:
            raise ValueError(f"sketch values must be finite and non-negative, got {x}")
        self.count += 1
        if x <= MIN_INDEXABLE:
            self.zero_count += 1
            return
        key = math.ceil(math.log(x) / self._log_gamma)
        self.buckets[key] = self.buckets.get(key, 0) + 1
        self._collapse()

    def add_many(self, xs: Iterable[float] | np.ndarray) -> None:
        """Add many values at once (vectorised; the same result as `add` on each)."""
        values = np.asarray(xs if isinstance(xs, np.ndarray) else list(xs), dtype=np.float64)
        values = values.ravel()
        if values.size == 0:
            return
        if not np.all(np.isfinite(values)) or np.any(values < 0.0):
            raise ValueError("sketch values must be finite and non-negative")
        zero = values <= MIN_INDEXABLE
        self.zero_count += int(zero.sum())
        self.count += int(values.size)
        positive = values[~zero]
        if positive.size:
            keys = np.ceil(np.log(positive) / self._log_gamma).astype(np.int64)
            uniq, counts = np.unique(keys, return_counts=True)
            for key, n in zip(uniq.tolist(), counts.tolist(), strict=True):
                self.buckets[key] = self.buckets.get(key, 0) + n
            self._collapse()

    def merge(self, other: LatencySketch) -> None:
        """Fold another sketch with the same alpha into this one, in place."""
        if not math.isclose(other.alpha, self.alpha):
            raise ValueError("cannot merge sketches with different alpha")
        for key, n in other.buckets.items():
            self.buckets[key] = self.buckets.get(key, 0) + n
        self.zero_count += other.zero_count
        self.count += other.count
        self._collapse()

    def _collapse(self) -> None:
        """Collapse the lowest buckets so at most `max_buckets` remain (keeps the tail exact)."""
        excess = len(self.buckets) - self.max_buckets
        if excess <= 0:
            return
        keys = sorted(self.buckets)
        target = keys[excess]
        moved = sum(self.buckets.pop(k) for k in keys[:excess])
        self.buckets[target] += moved

    # -- queries ---------------------------------------------------------------------------
    def quantile(self, q: float) -> float | None:
        """The q-quantile (0 <= q <= 1), within relative error alpha; None when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if self.count == 0:
            return None
        rank = q * (self.count - 1)
        if rank < self.zero_count:
            return 0.0
        seen = self.zero_count
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen > rank:
                # The bucket's midpoint in relative terms: (gamma^(k-1), gamma^k] -> 2g^k/(g+1).
                return 2.0 * self._gamma**key / (self._gamma + 1.0)
        return 2.0 * self._gamma ** max(self.buckets) / (self._gamma + 1.0)

    def __len__(self) -> int:
        return self.count

    # -- serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Compact JSON-ready form: sorted keys delta-encoded (usually small integers)."""
        keys = sorted(self.buckets)
        deltas = [keys[0]] + [b - a for a, b in zip(keys, keys[1:], strict=False)] if keys else []
        return {
            "alpha": self.alpha,
            "max": self.max_buckets,
            "z": self.zero_count,
            "k": deltas,
            "n": [self.buckets[k] for k in keys],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencySketch:
        """Rebuild a sketch from `to_dict` output."""
        keys = np.cumsum(np.asarray(data["k"], dtype=np.int64)).tolist() if data["k"] else []
        counts = [int(n) for n in data["n"]]
        sketch = cls(alpha=float(data["alpha"]), max_buckets=int(data["max"]))
        sketch.buckets = dict(zip(keys, counts, strict=True))
        sketch.zero_count = int(data["z"])
        sketch.count = sketch.zero_count + sum(counts)
        return sketch

    def copy(self) -> LatencySketch:
        """An independent copy."""
        return LatencySketch.from_dict(self.to_dict())


@dataclass
class WindowStats:
    """Statistics of the executions of one (device class, op kind) in one window."""

    count: int = 0
    errors: int = 0
    sum_ms: float = 0.0
    min_ms: float | None = None
    max_ms: float | None = None
    energy_sum_j: float = 0.0
    energy_count: int = 0
    sketch: LatencySketch = field(default_factory=LatencySketch)

    def add_batch(
        self,
        latencies: Sequence[float] | np.ndarray,
        errors: int | Sequence[bool] | np.ndarray = 0,
        energies: Sequence[float | None] | np.ndarray | None = None,
    ) -> None:
        """Fold a batch of executions in.

        ``latencies`` are execution times in ms. ``errors`` is either the number of failed
        executions not listed in ``latencies``, or a boolean mask aligned with ``latencies``
        (failed rows then count as executions and errors but stay out of the latency stats).
        ``energies`` (joules, aligned with ``latencies``) may hold None/NaN where not measured.
        """
        lat = np.asarray(latencies, dtype=np.float64).ravel()
        if isinstance(errors, int | np.integer):
            if errors < 0:
                raise ValueError("errors must be >= 0")
            ok = np.ones(lat.size, dtype=bool)
            self.count += int(errors) + lat.size
            self.errors += int(errors)
        else:
            failed = np.asarray(errors, dtype=bool).ravel()
            if failed.size != lat.size:
                raise ValueError("error mask must align with latencies")
            ok = ~failed
            self.count += lat.size
            self.errors += int(failed.sum())
        good = lat[ok]
        if good.size:
            self.sketch.add_many(good)
            self.sum_ms += float(good.sum())
            low, high = float(good.min()), float(good.max())
            self.min_ms = low if self.min_ms is None else min(self.min_ms, low)
            self.max_ms = high if self.max_ms is None else max(self.max_ms, high)
        if energies is not None:
            raw = energies if isinstance(energies, np.ndarray) else [
                np.nan if e is None else e for e in energies]
            energy = np.asarray(raw, dtype=np.float64).ravel()
            if energy.size != lat.size:
                raise ValueError("energies must align with latencies")
            measured = energy[ok & np.isfinite(energy)]
            self.energy_sum_j += float(measured.sum())
            self.energy_count += int(measured.size)

    def merge(self, other: WindowStats) -> None:
        """Fold another window's statistics into this one, in place."""
        self.count += other.count
        self.errors += other.errors
        self.sum_ms += other.sum_ms
        if other.min_ms is not None:
            self.min_ms = other.min_ms if self.min_ms is None else min(self.min_ms, other.min_ms)
        if other.max_ms is not None:
            self.max_ms = other.max_ms if self.max_ms is None else max(self.max_ms, other.max_ms)
        self.energy_sum_j += other.energy_sum_j
        self.energy_count += other.energy_count
        self.sketch.merge(other.sketch)

    @property
    def latency_count(self) -> int:
        """Number of successful executions with a latency."""
        return self.sketch.count

    def summary(self) -> dict[str, float | int | None]:
        """The figures the web view and benchmarks show; None where there is no data."""
        n = self.latency_count
        return {
            "count": self.count,
            "errors": self.errors,
            "mean_ms": self.sum_ms / n if n else None,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "p50_ms": self.sketch.quantile(0.50),
            "p95_ms": self.sketch.quantile(0.95),
            "p99_ms": self.sketch.quantile(0.99),
            "energy_j_mean": self.energy_sum_j / self.energy_count if self.energy_count else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for a table value."""
        return {
            "count": self.count,
            "errors": self.errors,
            "sum_ms": self.sum_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "energy_sum_j": self.energy_sum_j,
            "energy_count": self.energy_count,
            "sketch": self.sketch.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WindowStats:
        """Rebuild from `to_dict` output."""
        return cls(
            count=int(data["count"]),
            errors=int(data["errors"]),
            sum_ms=float(data["sum_ms"]),
            min_ms=None if data["min_ms"] is None else float(data["min_ms"]),
            max_ms=None if data["max_ms"] is None else float(data["max_ms"]),
            energy_sum_j=float(data["energy_sum_j"]),
            energy_count=int(data["energy_count"]),
            sketch=LatencySketch.from_dict(data["sketch"]),
        )
