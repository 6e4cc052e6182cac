"""StarPU-style performance history: the model behind the ``dmda`` baseline.

StarPU (Augonnet et al., 2011) keys a history of execution times by (codelet footprint,
architecture): a running mean and variance per entry, trusted once it holds
``STARPU_CALIBRATE_MINIMUM`` (10) samples. Its non-linear regression model fits
``a * size^b + c`` per (codelet, architecture) over the history, ``size`` being the total data
size. Here a codelet footprint is an op signature (kind + dims), an architecture a
(device class, variant) pair, and size ``op.bytes_moved(precision)``.

`HistoryModel` holds entries for any number of classes (dmda needs them all at once);
`HistoryCostModel` wraps it per class behind the cost-model interface, for the cost-model
benchmark and the contract tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from models.costmodel import MIN_EXEC_MS, Prediction, Row, validate_rows
from models.ops import OpSpec, Variant
from models.priors import prior_for_class
from models.regression import ErrorTracker

__all__ = ["CALIBRATE_MINIMUM", "HistoryCostModel", "HistoryModel", "PowerLaw"]

# StarPU's default STARPU_CALIBRATE_MINIMUM: an entry is trusted after 10 samples.
CALIBRATE_MINIMUM = 10
# Bounded state: a table value must stay small. 2,048 (shape, class, variant) entries of ~6
# numbers each is ~100 KB of JSON; the least recently updated entry goes first.
MAX_ENTRIES = 2048
# A power law needs at least this many distinct sizes to be fitted (3 parameters).
MIN_POWER_LAW_POINTS = 3
# The largest ln of a power law's term kept: exp() of more overflows a double.
MAX_LOG = 700.0

PowerLaw = tuple[float, float, float]  # (a, b, c): time_ms = a * size^b + c


def _key(device_class: str, op: OpSpec, variant: Variant) -> str:
    return f"{device_class}|{variant.precision}/{variant.mode}|{op.signature()}"


def _group(key: str) -> str:
    """(class, variant, op kind) of an entry key: the unit a power law is fitted over."""
    device_class, variant, signature = key.split("|", 2)
    return f"{device_class}|{variant}|{signature.split(':', 1)[0]}"


def fit_power_law(sizes: np.ndarray, times: np.ndarray, weights: np.ndarray) -> PowerLaw | None:
    """Fit ``t = a * s^b + c`` (a > 0, 0 <= c < min t) by weighted least squares in log space.

    As StarPU does, for a trial ``c`` the pair (a, b) is the linear fit of ln(t - c) on ln(s);
    ``c`` is then chosen by golden-section search on the residual. None with fewer than
    `MIN_POWER_LAW_POINTS` distinct sizes.
    """
    if np.unique(sizes).size < MIN_POWER_LAW_POINTS:
        return None
    ls, lt = np.log(sizes), np.log(times)
    w = weights / weights.sum()

    def fit(c: float) -> tuple[float, float, float]:
        """(ln a, b, weighted squared log error) for a trial ``c``."""
        target = np.log(times - c)
        ms, mt = w @ ls, w @ target
        var = w @ (ls - ms) ** 2
        b = float((w @ ((ls - ms) * (target - mt))) / var) if var > 0 else 0.0
        log_a = float(mt - b * ms)
        pred = np.log(np.exp(log_a + b * ls) + c)
        return log_a, b, float(w @ (lt - pred) ** 2)

    lo, hi = 0.0, float(times.min()) * (1 - 1e-6)
    ratio = (math.sqrt(5) - 1) / 2
    # 40 golden-section steps shrink the bracket by 0.618^40 ~ 4e-9: below any timer.
    x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    f1, f2 = fit(x1)[2], fit(x2)[2]
    for _ in range(40):
        if f1 < f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - ratio * (hi - lo)
            f1 = fit(x1)[2]
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + ratio * (hi - lo)
            f2 = fit(x2)[2]
    c = 0.5 * (lo + hi)
    log_a, b, _, c = min((fit(c) + (c,), fit(0.0) + (0.0,)), key=lambda r: r[2])
    if not (math.isfinite(log_a) and math.isfinite(b)) or abs(log_a) > MAX_LOG:
        # Sizes too close together for a slope (a law that scales time by e^700 between
        # them, or an ``a`` below e^-700 that is 0.0 as a float): no law, the history's means
        # answer instead.
        return None
    return math.exp(log_a), b, c


class HistoryModel:
    """Per (op signature, device class, variant): count, mean and variance of exec time (and
    mean energy); power laws per (op kind, class, variant) fitted from those entries."""

    def __init__(
        self, calibrate_minimum: int = CALIBRATE_MINIMUM, max_entries: int = MAX_ENTRIES
    ) -> None:
        self.calibrate_minimum = int(calibrate_minimum)
        self.max_entries = int(max_entries)
        # key -> [count, mean_ms, m2, size_bytes, energy_count, energy_mean_j]
        self.entries: dict[str, list[float]] = {}
        self.version = 0  # increments on every change: lets readers cache a deserialised copy
        self._laws: dict[str, PowerLaw | None] = {}

    # -- learning --------------------------------------------------------------------------
    def _take_entry(self, key: str, op: OpSpec, variant: Variant) -> list[float]:
        """The entry of ``key``, taken out to be re-inserted last (dict order is recency); a
        new one, the least recent evicted, when it has none."""
        entry = self.entries.pop(key, None)
        if entry is None:
            entry = [0.0, 0.0, 0.0, op.bytes_moved(variant.precision), 0.0, 0.0]
            while len(self.entries) >= self.max_entries:
                oldest = next(iter(self.entries))
                self._laws.pop(_group(oldest), None)
                del self.entries[oldest]
        return entry

    def observe(
        self,
        device_class: str,
        op: OpSpec,
        variant: Variant,
        exec_ms: float,
        energy_j: float | None = None,
    ) -> None:
        """Record one execution (Welford update of the entry's mean and variance)."""
        key = _key(device_class, op, variant)
        entry = self._take_entry(key, op, variant)
        entry[0] += 1
        delta = exec_ms - entry[1]
        entry[1] += delta / entry[0]
        entry[2] += delta * (exec_ms - entry[1])
        if energy_j is not None:
            entry[4] += 1
            entry[5] += (energy_j - entry[5]) / entry[4]
        self.entries[key] = entry
        self.version += 1
        self._laws.pop(_group(key), None)

    def observe_many(self, device_class: str, rows: Iterable[Row]) -> None:
        """Record a batch of one class's executions."""
        for op, variant, exec_ms, energy_j in validate_rows(rows):
            self.observe(device_class, op, variant, exec_ms, energy_j)

    def observe_indexed(
        self,
        device_class: str,
        pairs: Sequence[tuple[OpSpec, Variant]],
        index: np.ndarray,
        exec_ms: np.ndarray,
        energy_j: np.ndarray | None = None,
    ) -> None:
        """Record a batch of one class's executions given column-wise (as
        `models.costmodel.CostModel.learn_indexed` takes it): each distinct pair's rows are
        folded into its entry at once (Chan et al.'s merge of count, mean and squared
        deviations: the sequential Welford result, to rounding), entries in the order of
        their last row, so recency is as if the rows came one by one. Times are read as
        `validate_rows` reads them (ValueError before any change for a bad one)."""
        index = np.asarray(index, dtype=np.intp)
        times = np.asarray(exec_ms, dtype=np.float64)
        bad = np.flatnonzero(~(np.isfinite(times) & (times >= 0.0)))
        if bad.size:
            raise ValueError(f"row {int(bad[0])}: exec_ms must be finite and >= 0, "
                             f"got {times[int(bad[0])]}")
        if not times.size:
            return
        times = np.maximum(times, MIN_EXEC_MS)
        energy = (np.full(times.size, np.nan) if energy_j is None
                  else np.asarray(energy_j, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            measured = np.isfinite(energy) & (energy > 0.0)
        last_row = np.full(len(pairs), -1)
        last_row[index] = np.arange(index.size)  # the last assignment to an index wins
        by_pair = np.argsort(index, kind="stable")
        ends = np.cumsum(np.bincount(index, minlength=len(pairs)))
        for at in np.argsort(last_row, kind="stable"):
            if last_row[at] < 0:
                continue
            rows = by_pair[(ends[at - 1] if at else 0):ends[at]]
            x = times[rows]
            op, variant = pairs[int(at)]
            key = _key(device_class, op, variant)
            entry = self._take_entry(key, op, variant)
            n_a, n_b = entry[0], float(x.size)
            mean_b = float(x.mean())
            delta = mean_b - entry[1]
            total = n_a + n_b
            entry[1] += delta * n_b / total
            entry[2] += float(np.square(x - mean_b).sum()) + delta * delta * n_a * n_b / total
            entry[0] = total
            e = energy[rows[measured[rows]]]
            if e.size:
                entry[4] += e.size
                entry[5] += (float(e.mean()) - entry[5]) * e.size / entry[4]
            self.entries[key] = entry
            self._laws.pop(_group(key), None)
        self.version += int(times.size)

    # -- queries ---------------------------------------------------------------------------
    def count(self, device_class: str, op: OpSpec, variant: Variant) -> int:
        """Samples recorded for the entry (0 if none)."""
        entry = self.entries.get(_key(device_class, op, variant))
        return 0 if entry is None else int(entry[0])

    def is_calibrated(self, device_class: str, op: OpSpec, variant: Variant) -> bool:
        """StarPU's rule: trusted after `calibrate_minimum` samples."""
        return self.count(device_class, op, variant) >= self.calibrate_minimum

    def mean_ms(self, device_class: str, op: OpSpec, variant: Variant) -> float | None:
        """Mean exec time of the entry; None if never run."""
        entry = self.entries.get(_key(device_class, op, variant))
        return None if entry is None else entry[1]

    def std_ms(self, device_class: str, op: OpSpec, variant: Variant) -> float | None:
        """Sample std of the entry; None below two samples."""
        entry = self.entries.get(_key(device_class, op, variant))
        if entry is None or entry[0] < 2:
            return None
        return math.sqrt(max(entry[2], 0.0) / (entry[0] - 1))

    def energy_j(self, device_class: str, op: OpSpec, variant: Variant) -> float | None:
        """Mean measured energy of the entry; None if never measured."""
        entry = self.entries.get(_key(device_class, op, variant))
        return None if entry is None or not entry[4] else entry[5]

    def expected_ms(self, device_class: str, op: OpSpec, variant: Variant) -> float | None:
        """StarPU's history-based expectation: the mean once calibrated, else None."""
        if not self.is_calibrated(device_class, op, variant):
            return None
        return self.mean_ms(device_class, op, variant)

    def power_law(self, device_class: str, kind: str, variant: Variant) -> PowerLaw | None:
        """The fitted ``(a, b, c)`` for (class, op kind, variant); cached until it changes."""
        group = f"{device_class}|{variant.precision}/{variant.mode}|{kind}"
        if group not in self._laws:
            rows = [e for k, e in self.entries.items() if _group(k) == group]
            law = None
            if rows:
                arr = np.asarray(rows)
                law = fit_power_law(arr[:, 3], np.maximum(arr[:, 1], 1e-9), arr[:, 0])
            self._laws[group] = law
        return self._laws[group]

    def regression_ms(self, device_class: str, op: OpSpec, variant: Variant) -> float | None:
        """StarPU's non-linear regression estimate ``a * size^b + c``; None until fitted."""
        law = self.power_law(device_class, op.kind, variant)
        if law is None:
            return None
        a, b, c = law
        log_term = math.log(a) + b * math.log(max(op.bytes_moved(variant.precision), 1e-9))
        return None if log_term > MAX_LOG else math.exp(log_term) + c

    # -- state -----------------------------------------------------------------------------
    def subset(self, device_class: str) -> HistoryModel:
        """The entries of one class (what one table key would hold)."""
        out = HistoryModel(self.calibrate_minimum, self.max_entries)
        prefix = f"{device_class}|"
        out.entries = {k: list(e) for k, e in self.entries.items() if k.startswith(prefix)}
        out.version = self.version
        return out

    def merge(self, other: HistoryModel) -> None:
        """Fold another history in (Chan's parallel mean/variance combination)."""
        for key, e in other.entries.items():
            mine = self.entries.get(key)
            if mine is None:
                self.entries[key] = list(e)
                continue
            n = mine[0] + e[0]
            delta = e[1] - mine[1]
            mean = mine[1] + delta * e[0] / n
            m2 = mine[2] + e[2] + delta * delta * mine[0] * e[0] / n
            en = mine[4] + e[4]
            emean = (mine[5] * mine[4] + e[5] * e[4]) / en if en else 0.0
            self.entries[key] = [n, mean, m2, mine[3], en, emean]
        while len(self.entries) > self.max_entries:
            del self.entries[next(iter(self.entries))]
        self.version += other.version
        self._laws.clear()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state."""
        return {
            "calibrate_minimum": self.calibrate_minimum,
            "max_entries": self.max_entries,
            "version": self.version,
            "entries": {k: list(e) for k, e in self.entries.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HistoryModel:
        """Rebuild from `to_dict` output."""
        model = cls(int(data["calibrate_minimum"]), int(data["max_entries"]))
        model.entries = {str(k): [float(v) for v in e] for k, e in data["entries"].items()}
        model.version = int(data.get("version", 0))
        return model

    def clone(self) -> HistoryModel:
        """An independent copy."""
        return HistoryModel.from_dict(self.to_dict())


class HistoryCostModel:
    """One class's view of a `HistoryModel` behind the cost-model interface.

    ``mode="history"``: the entry's mean where the shape was seen, else the power law, else the
    roofline prior. ``mode="powerlaw"``: the power law first. The spread is the entry's sample
    std (or 100% where unknown); Thompson samples shrink it with the entry count.
    """

    def __init__(
        self, device_class: str, mode: str = "history", history: HistoryModel | None = None
    ) -> None:
        if mode not in ("history", "powerlaw"):
            raise ValueError(f"mode must be history or powerlaw, got {mode!r}")
        self.device_class = device_class
        self.mode = mode
        self.history = history if history is not None else HistoryModel()
        self.prior = prior_for_class(device_class)
        self.errors = ErrorTracker()
        self._version = 0
        self._rows = 0

    @property
    def version(self) -> int:
        """Increments on every learn call."""
        return self._version

    @property
    def samples(self) -> int:
        """Rows learned."""
        return self._rows

    def _mean_and_count(self, op: OpSpec, variant: Variant) -> tuple[float, int]:
        h, cls = self.history, self.device_class
        seen = h.mean_ms(cls, op, variant)
        law = h.regression_ms(cls, op, variant)
        order = (law, seen) if self.mode == "powerlaw" else (seen, law)
        for value in order:
            if value is not None and value > 0:
                return value, h.count(cls, op, variant)
        return math.exp(self.prior.roofline_log_ms(op, variant)), -1

    def predict_one(self, op: OpSpec, variant: Variant) -> Prediction:
        """The entry mean / power law / roofline prior, by mode; 100% spread where unknown."""
        mean, count = self._mean_and_count(op, variant)
        std = self.history.std_ms(self.device_class, op, variant)
        rel = 1.0 if std is None or count < 1 else max(std / mean, 1e-3)
        log_std = math.sqrt(math.log1p(rel * rel))
        return Prediction(
            mean_ms=mean,
            std_ms=mean * rel,
            energy_j=self.history.energy_j(self.device_class, op, variant),
            energy_std_j=None,
            samples=self._rows,
            log_mean=math.log(mean),
            log_std=log_std,
        )

    def sample_ms(self, op: OpSpec, variant: Variant, rng: np.random.Generator) -> float:
        """A draw around the prediction, narrowing with the entry's count."""
        pred = self.predict_one(op, variant)
        count = max(self.history.count(self.device_class, op, variant), 1)
        return math.exp(
            pred.log_mean + pred.log_std / math.sqrt(count) * float(rng.standard_normal())
        )

    def learn_one(
        self, op: OpSpec, variant: Variant, exec_ms: float, energy_j: float | None = None
    ) -> None:
        """Learn one measured execution."""
        self.learn_many([(op, variant, exec_ms, energy_j)])

    def learn_many(self, rows: Iterable[Row]) -> None:
        """Record a batch (predicting each row first, for the running error)."""
        batch = validate_rows(rows)
        if not batch:
            return
        for op, variant, exec_ms, energy_j in batch:
            predicted = self.predict_one(op, variant).mean_ms
            self.errors.add_many(np.array([predicted]), np.array([exec_ms]))
            self.history.observe(self.device_class, op, variant, exec_ms, energy_j)
        self._rows += len(batch)
        self._version += 1

    def error_summary(self) -> dict[str, float | int | None]:
        """Progressive-validation abs % error (count, ewma, median, p90, mean)."""
        return self.errors.summary()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state."""
        return {
            "kind": self.mode,
            "device_class": self.device_class,
            "version": self._version,
            "rows": self._rows,
            "history": self.history.subset(self.device_class).to_dict(),
            "errors": self.errors.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HistoryCostModel:
        """Rebuild from `to_dict` output."""
        model = cls(
            str(data["device_class"]), str(data["kind"]), HistoryModel.from_dict(data["history"])
        )
        model._version = int(data["version"])
        model._rows = int(data["rows"])
        model.errors = ErrorTracker.from_dict(data["errors"])
        return model

    def clone(self) -> HistoryCostModel:
        """An independent copy."""
        return HistoryCostModel.from_dict(self.to_dict())
