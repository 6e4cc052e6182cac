"""Per-device-class cost models: predicted execution time (and energy) of an op/variant.

`CostModel` regresses ln(exec ms) — and ln(joules) where energy is measured — on
`models.shape_features.shape_features` (the roofline prior bent by per-kind efficiency curves,
cache-fit and alignment features) with `models.regression.BayesLinReg`, starting from the
class's roofline prior (`models.priors`). It follows river's contract: ``predict_one`` works on a fresh
model, ``learn_one``/``learn_many`` never mutate their inputs, and the state round-trips through
``to_dict``/``from_dict`` (plain JSON, a few KB: a value of the ``models`` table).

Every row learned is first predicted (progressive validation), so ``error_summary()`` is the
error on data the model had not seen.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from models.local_residuals import LocalResiduals, local_key
from models.ops import OpSpec, Variant
from models.priors import PriorDevice, prior_for_class
from models.regression import BayesLinReg, ErrorTracker
from models.shape_features import (
    BIAS_INDEX,
    FEATURE_FORMAT,
    N_SHAPE_FEATURES,
    PRIOR_INDEX,
    SHAPE_FEATURE_NAMES,
    feature_group,
    shape_features,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CostModel",
    "CostModelLike",
    "Prediction",
    "Row",
    "compare_online",
    "validate_rows",
]

# One learned row: (op, variant, measured exec ms, measured joules or None).
Row = tuple[OpSpec, Variant, float, float | None]
# 1 ns: what a zero reading (below perf_counter_ns resolution) is taken to mean; the models
# work on log time, which a literal 0 would break.
MIN_EXEC_MS = 1e-6


@dataclass(frozen=True)
class Prediction:
    """A cost prediction. ``mean_ms`` is exp of the predicted mean log time (the median of the
    log-normal predictive); ``std_ms`` its log-normal std; ``log_mean``/``log_std`` are the
    predictive moments of ln(ms) themselves (``param_var`` is the weights' share of the
    variance, what Thompson samples spread by). Energy fields are None until energy is
    measured."""

    mean_ms: float
    std_ms: float
    energy_j: float | None
    energy_std_j: float | None
    samples: int
    log_mean: float = 0.0
    log_std: float = 0.0
    param_var: float = 0.0  # the part of log_std^2 due to weight uncertainty


@runtime_checkable
class CostModelLike(Protocol):
    """What policies and agents rely on; `CostModel`, `SGDCostModel` and `HistoryCostModel`
    all provide it."""

    device_class: str

    @property
    def version(self) -> int:
        """Increments on every learn call."""

    @property
    def samples(self) -> int:
        """Rows of execution time learned."""

    def predict_one(self, op: OpSpec, variant: Variant) -> Prediction:
        """Predicted time (and energy) of ``op`` at ``variant``; works on a fresh model."""

    def sample_ms(self, op: OpSpec, variant: Variant, rng: np.random.Generator) -> float:
        """A Thompson sample of the expected time (deterministic given ``rng``)."""

    def learn_one(
        self, op: OpSpec, variant: Variant, exec_ms: float, energy_j: float | None = None
    ) -> None:
        """Learn one measured execution; never mutates its inputs."""

    def learn_many(self, rows: Iterable[Row]) -> None:
        """Learn a batch of rows (op, variant, exec_ms, energy_j or None)."""

    def error_summary(self) -> dict[str, float | int | None]:
        """Progressive-validation error: count, ewma_ape, median_ape, p90_ape, mean_ape (percent)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state; `from_dict` (or `models.costmodels.cost_model_from_dict`) rebuilds it."""

    def clone(self) -> CostModelLike:
        """An independent copy with the same learned state."""


def validate_rows(rows: Iterable[Row]) -> list[Row]:
    """Check every row before any state changes (a batch is learned whole or not at all).

    Raises ValueError for a negative or non-finite exec time. A time of exactly 0 is below the
    clock's resolution and is read as `MIN_EXEC_MS`. Energy that is None, non-finite or <= 0
    is treated as not measured.
    """
    out: list[Row] = []
    for i, (op, variant, exec_ms, energy_j) in enumerate(rows):
        exec_ms = float(exec_ms)
        if not math.isfinite(exec_ms) or exec_ms < 0.0:
            raise ValueError(f"row {i}: exec_ms must be finite and >= 0, got {exec_ms}")
        exec_ms = max(exec_ms, MIN_EXEC_MS)
        energy = None
        if energy_j is not None and math.isfinite(float(energy_j)) and float(energy_j) > 0.0:
            energy = float(energy_j)
        out.append((op, variant, exec_ms, energy))
    return out


# The most a Thompson draw spreads a prediction by (ln units, one std): the weights' std of a
# cold live class reads 1.3-3.6 at the live mix's shapes (the prior stds are sized for how
# far data may move the weights, not for how far a cold prediction misses), while the cold
# calibrated priors measured miss by a median of 46-51 % and a p90 of 180-216 % (`switchyard
# bench priors`: a log std of ~0.6-0.7). Draws at the full width sent a tenth of the live bf16
# set's workloads to options 3-7x slower by their means (JAX compilations, NumPy layernorms);
# in six of six interleaved pairs of that set (switchyard alone, 2026-12-07) the mean
# completion was lower with draws capped here: 111/100/97/83/107/107 ms against
# 102/86/79/79/100/105. `Prediction.param_var` itself is not capped: idle probes rank by it.
DRAW_LOG_SD_MAX = 1.0


def draw_log_sd(param_var: float) -> float:
    """The std (ln units) a Thompson draw of a prediction spreads by: its weights' std, at
    most `DRAW_LOG_SD_MAX`."""
    return min(math.sqrt(max(param_var, 0.0)), DRAW_LOG_SD_MAX)


def _lognormal_std(log_mean: float, log_var: float) -> float:
    """Std of a log-normal with these log moments (relative to its median exp(log_mean))."""
    return math.exp(log_mean) * math.sqrt(math.expm1(min(log_var, 50.0)))


# Prior std of each weight (ln units per unit of feature), by how far the roofline is trusted.
# "sim": the simulator *is* a roofline plus noise, so corrections stay small; "live": real
# runtimes miss the roofline by 2-10x (cache effects, dispatch, emulated precisions), so the
# offset may move by e^1, the curve's slope by ~0.1 per ln unit of work (the work feature
# spans +-7: slopes and hinges are scaled so a cold prediction stays within ~e^1), and each
# kind, precision and mode shift it by up to ~e^0.5. Per-kind slopes are tighter than the
# shared ones (the shared curve carries most of the shape), except the per-kind slope of a
# non-fp32 or compiled variant: 0.2 measured best (top-1 on held-out shapes 66 % at 0.05,
# 76 % at 0.1, 80 % at 0.2, no better at 0.25-0.4; median error flat at 20-22 %). With the
# format-4 features, a non-fp32 offset of 0.8 (was 0.4) and these slopes at 0.3: torch's
# bf16 costs ~e^2 fp32's on small convolutions and less than fp32 on large ones, a slope of
# ~-0.7 per ln unit on matmuls, 3.5 prior stds out at 0.2, and torch bf16 vs fp32 was most
# of the top-1 misses. Replayed (six held-out draws, 200 rows/class): top-1 72.5 -> 76.9 %,
# median error 14.9 -> 14.6 %; model layers top-1 85.7 -> 88.8 %, error 25.4 -> 25.9 %.
# The transcendental-activation weights ("act", format 6) are wide in live classes (1.0): a
# runtime's cost per erf/exp element is unknown a priori (NumPy's gelu calls scipy's erf,
# torch's runs one kernel); models/shape_features.py has the replayed numbers (at 0.3 a
# third to half of the gain was kept).
PRIOR_STD: dict[str, dict[str, float]] = {
    "sim": {
        "bias": 0.3,
        "prior_log_ms": 0.02,
        "work": 0.02,
        "hinge": 0.01,
        "kind": 0.2,
        "work@kind": 0.01,
        "variant": 0.2,
        "work@variant": 0.01,
        "lowprec@kind": 0.1,
        "compiled@kind": 0.1,
        "work@variant@kind": 0.01,
        "spill": 0.005,
        "aligned": 0.05,
        "calls": 0.05,
        "small@kind": 0.01,
        "act": 0.05,
        "traffic": 0.05,
    },
    "live": {
        "bias": 1.0,
        "prior_log_ms": 0.1,
        "work": 0.12,
        "hinge": 0.08,
        "kind": 0.5,
        "work@kind": 0.05,
        "variant": 0.5,
        "work@variant": 0.05,
        "lowprec@kind": 0.8,
        "compiled@kind": 0.3,
        "work@variant@kind": 0.3,
        "spill": 0.04,
        "aligned": 0.05,
        "calls": 0.3,
        "small@kind": 0.1,
        "act": 1.0,
        "traffic": 0.3,
    },
}
# A live class whose executors timed reference ops of each kind (models/priors.py
# ``kind_factors``: the prior already bends each kind's work by what its reference op
# measured) keeps the live stds but a tighter shared work slope and hinges: there the shared
# curve only has to carry what the calibration missed, and with the live slopes the residuals
# of the kinds a class ran leaked into kinds it had not (torch's unseen conv2d read 34-39 ms
# after the live mix's other kinds were learned, 18-22 measured). Replayed by
# `python -m bench.prior_stds` on the priors benchmark's profiles (calibrated priors of torch,
# JAX and NumPy, live mix and model layers, 5 draws): a kind never learned, median error
# 51.1 -> 46.0 % (p90 216 -> 180 %); held-out shapes of the kinds learned 22.1 -> 22.4 %, the
# fastest variant picked 87.3 -> 88.2 %; with every time 2x its profile (a slowdown the
# calibration did not see) 51.5 -> 46.8 % and 22.0 -> 22.3 %. A tighter bias (0.3) or wider
# kind offsets (0.8) alone did not help.
PRIOR_STD["calibrated"] = {**PRIOR_STD["live"], "work": 0.03, "hinge": 0.02}
# Huber threshold (predictive stds) for a time *above* the prediction. Interference on a
# shared machine only ever slows a run, so timing noise is one-sided: with the symmetric 2.5
# the regression followed the mean of ln(ms), above the typical (median) time by 22 % on the
# JAX class of the costmodel benchmark (6-7 % on torch/NumPy). At 1.0 (measured offline on
# full-mode data, 200 rows/class): held-out median error 20.5 -> 18.8 %, top-1 80 -> 80 %;
# 1000 rows: 19.8 -> 17.2 %, 85 -> 87 %; model layers 35.9 -> 34.0 %, top-1 74 -> 79 %.
# (0.5 gave 17.1 % / 78 % at 200 rows: a little lower error, not better picks.) 0.7 with the
# live noise below at 0.2 (format 4): see there. A real slowdown is still followed: the drift
# detector reads the unweighted residuals.
HUBER_K_SLOW = 0.7
# Prior residual std (ln units): the simulator's noise is ~10%; live timings jitter ~20-30%.
# It also sets how many rows the weight prior is worth (its precision is noise^2 / std^2,
# while the noise itself is then estimated from the innovations): at 0.2 rather than 0.3
# the data outweigh the prior 2.25x sooner. With the alignment prior tightened to 0.05 (it
# extrapolates to the aligned model layers from mostly unaligned random shapes) and the Huber
# threshold at 0.7, replayed on the cost-model benchmark's measurements (six held-out draws,
# seeds 5-10): held-out median error at 50/200/1000 rows 22.2/14.6/12.1 -> 21.9/13.7/11.4 %,
# top-1 60/77/80 -> 61/78/81 %; model layers 32.7/25.9/22.7 -> 32.7/25.2/21.4 %, top-1
# 61/89/92 -> 64/90/92 %; +-2 sigma coverage 96.4 -> 95.8 % (held-out, 200 rows). At 0.2
# without the tighter alignment prior, the layers' top-1 at 1000 rows fell to 88 %.
# Not 0.15 for live classes: replayed offline it looked slightly better (over 17 held-out
# splits, median error 14.9 -> 14.6 %, top-1 74.6 -> 75.7 %), but on low-noise rows it
# tripled the drift detector's resets (tests/app/test_web.py: 3 events against 1 on 200
# matmuls with a 5 % pattern, and nothing left learned), which the offline replay cannot see.
NOISE_STD: dict[str, float] = {"sim": 0.15, "live": 0.2}


def prior_stds_name(prior: PriorDevice) -> str:
    """Which ``PRIOR_STD`` set a cold model of ``prior`` starts from."""
    return "calibrated" if prior.scale == "live" and prior.kind_factors else prior.scale


def _prior_arrays(stds_name: str, bias_mean: float) -> tuple[np.ndarray, np.ndarray]:
    stds = PRIOR_STD[stds_name]
    mean = np.zeros(N_SHAPE_FEATURES)
    std = np.array([stds[feature_group(name)] for name in SHAPE_FEATURE_NAMES])
    mean[PRIOR_INDEX] = 1.0
    mean[BIAS_INDEX] = bias_mean
    return mean, std


class CostModel:
    """Bayesian linear regression of ln(time) and ln(energy) for one device class."""

    KIND = "blr"
    FEATURE_NAMES = SHAPE_FEATURE_NAMES
    # Features are pure functions of (op, variant) for a fixed prior device; caching them
    # makes a repeat prediction two dot products. Cleared when full to stay bounded.
    FEATURE_CACHE_SIZE = 4096

    def __init__(
        self, device_class: str, prior: PriorDevice | None = None, *, forgetting: float = 0.998
    ) -> None:
        """A cold model at the roofline prior of ``prior`` (default: `prior_for_class`).

        ``forgetting`` 0.998 keeps ~500 rows of memory: enough for the 90 weights on a mixed
        stream, while abrupt shifts are caught by the regression's drift detector.
        """
        self.device_class = device_class
        self.prior = prior or prior_for_class(device_class)
        scale = self.prior.scale
        mean, std = _prior_arrays(prior_stds_name(self.prior), 0.0)
        self.time = BayesLinReg(
            mean,
            std,
            NOISE_STD[scale],
            forgetting=forgetting,
            bias_index=BIAS_INDEX,
            huber_k_slow=HUBER_K_SLOW,
        )
        self.energy: BayesLinReg | None = None
        # What the regression misses on the exact shapes it measured (models/local_residuals.py).
        self.local = LocalResiduals()
        self.errors = ErrorTracker()
        self.energy_errors = ErrorTracker()
        self._version = 0
        self._cache: dict[tuple[OpSpec, Variant], np.ndarray] = {}
        # Predictions of this exact learned state (a decider's model is a frozen copy of one
        # stored version and sees the same layer shapes again and again); cleared by learning.
        self._predictions: dict[tuple[OpSpec, Variant], Prediction] = {}
        self._predicted_state: tuple[int, int, int] = (-1, -1, -1)

    @classmethod
    def for_class(cls, device_class: str, **options: Any) -> CostModel:
        """A cold model for ``device_class`` with its roofline prior."""
        return cls(device_class, **options)

    def _new_energy_regression(self) -> BayesLinReg:
        scale = self.prior.scale
        # ln(J) = ln(ms) + ln(W / 1000): the prior is busy power times the roofline time.
        mean, std = _prior_arrays(prior_stds_name(self.prior),
                                  math.log(self.prior.busy_power_w / 1e3))
        return BayesLinReg(
            mean,
            std,
            NOISE_STD[scale] * 1.5,
            forgetting=self.time.forgetting,
            bias_index=BIAS_INDEX,
            huber_k_slow=HUBER_K_SLOW,
        )

    # -- contract properties ---------------------------------------------------------------
    @property
    def version(self) -> int:
        """Increments on every learn call (a table write can carry it)."""
        return self._version

    @property
    def samples(self) -> int:
        """Rows of execution time learned."""
        return self.time.rows

    @property
    def energy_samples(self) -> int:
        """Rows with measured energy learned."""
        return 0 if self.energy is None else self.energy.rows

    # -- prediction ------------------------------------------------------------------------
    def features(self, op: OpSpec, variant: Variant) -> np.ndarray:
        """The (cached, read-only) feature vector of ``op`` at ``variant`` on this class."""
        key = (op, variant)
        x = self._cache.get(key)
        if x is None:
            if len(self._cache) >= self.FEATURE_CACHE_SIZE:
                self._cache.clear()
            roofline, work = self.prior.roofline_and_work_log_ms(op, variant)
            x = shape_features(op, variant, roofline, work, self.prior.cache_bytes,
                               self.prior.device.mem_bw_bytes_s)
            x.flags.writeable = False
            self._cache[key] = x
        return x

    def prior_ms(self, op: OpSpec, variant: Variant) -> float:
        """The roofline prior time in ms."""
        return math.exp(self.prior.roofline_log_ms(op, variant))

    def predict_one(self, op: OpSpec, variant: Variant) -> Prediction:
        """Predicted time (and energy, once measured) with uncertainty."""
        state = (self._version, self.time.rows, self.energy_samples)
        if state != self._predicted_state:
            self._predictions = {}
            self._predicted_state = state
        key = (op, variant)
        cached = self._predictions.get(key)
        if cached is None:
            if len(self._predictions) >= self.FEATURE_CACHE_SIZE:
                self._predictions.clear()
            cached = self._predictions[key] = self._predict_one(op, variant)
        return cached

    def _predict_one(self, op: OpSpec, variant: Variant) -> Prediction:
        x = self.features(op, variant)
        mu, param_var, noise = self.time.moments(x)
        if len(self.local):
            mu, param_var = self.local.correct(local_key(op, variant), mu, param_var, noise)
        var = param_var + noise
        energy_j = energy_std_j = None
        if self.energy is not None and self.energy.rows:
            e_mu, e_param, e_noise = self.energy.moments(x)
            energy_j = math.exp(e_mu)
            energy_std_j = _lognormal_std(e_mu, e_param + e_noise)
        return Prediction(
            mean_ms=math.exp(mu),
            std_ms=_lognormal_std(mu, var),
            energy_j=energy_j,
            energy_std_j=energy_std_j,
            samples=self.samples,
            log_mean=mu,
            log_std=math.sqrt(var),
            param_var=param_var,
        )

    def sample_ms(self, op: OpSpec, variant: Variant, rng: np.random.Generator) -> float:
        """A Thompson sample of the expected time: the mean log time drawn from the posterior
        (weight uncertainty only, not the run-to-run noise; spread at most
        `DRAW_LOG_SD_MAX`)."""
        pred = self.predict_one(op, variant)
        return math.exp(pred.log_mean + draw_log_sd(pred.param_var) * float(rng.standard_normal()))

    def predict_sample(
        self, op: OpSpec, variant: Variant, rng: np.random.Generator
    ) -> tuple[Prediction, float]:
        """`predict_one` and `sample_ms` in one pass (the decide agent's hot path); the same
        results and the same draw from ``rng`` as calling both."""
        pred = self.predict_one(op, variant)
        draw = math.exp(pred.log_mean + draw_log_sd(pred.param_var) * float(rng.standard_normal()))
        return pred, draw

    # -- learning --------------------------------------------------------------------------
    def learn_one(
        self, op: OpSpec, variant: Variant, exec_ms: float, energy_j: float | None = None
    ) -> None:
        """Learn one measured execution (predicting it first, for the running error)."""
        self.learn_many([(op, variant, exec_ms, energy_j)])

    def learn_many(self, rows: Iterable[Row]) -> None:
        """Learn a batch; the weights equal learning the rows one by one, in order."""
        batch = validate_rows(rows)
        if not batch:
            return
        pairs: dict[tuple[OpSpec, Variant], int] = {}
        index = np.fromiter((pairs.setdefault((op, variant), len(pairs))
                             for op, variant, _, _ in batch), dtype=np.intp, count=len(batch))
        self.learn_indexed(
            list(pairs), index, np.array([r[2] for r in batch], dtype=np.float64),
            np.array([np.nan if r[3] is None else r[3] for r in batch], dtype=np.float64))

    def learn_indexed(
        self,
        pairs: Sequence[tuple[OpSpec, Variant]],
        index: np.ndarray,
        exec_ms: np.ndarray,
        energy_j: np.ndarray | None = None,
    ) -> None:
        """Learn a batch given column-wise, as the metric stage holds it: the batch's distinct
        ``(op, variant)`` pairs, and per row the index of its pair, its exec ms and its joules
        (NaN, or <= 0: not measured). The same result as `learn_many` on the rows, with the
        features built and the d x d work done once per distinct pair, not per row.

        Raises ValueError (before any change) for a negative or non-finite exec time.
        """
        index = np.asarray(index, dtype=np.intp)
        times = np.asarray(exec_ms, dtype=np.float64)
        if index.shape != times.shape or index.ndim != 1:
            raise ValueError("index and exec_ms must be 1-d and aligned")
        bad = np.flatnonzero(~(np.isfinite(times) & (times >= 0.0)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"row {i}: exec_ms must be finite and >= 0, got {times[i]}")
        if not times.size:
            return
        X = np.stack([self.features(op, variant) for op, variant in pairs])
        y = np.log(np.maximum(times, MIN_EXEC_MS))
        mu, _ = self.time.update(X, y, index=index)
        self.errors.add_many(np.exp(mu), np.exp(y))
        # Each pair's mean residual against the regression as it now stands.
        counts = np.bincount(index, minlength=len(pairs))
        sums = np.bincount(index, weights=y, minlength=len(pairs))
        after, _, _ = self.time.moments_many(X)
        for pair in np.flatnonzero(counts).tolist():
            op, variant = pairs[pair]
            self.local.add(local_key(op, variant), int(counts[pair]),
                           float(sums[pair] / counts[pair] - after[pair]))
        if energy_j is not None:
            energy = np.asarray(energy_j, dtype=np.float64)
            with np.errstate(invalid="ignore"):
                measured = np.flatnonzero(np.isfinite(energy) & (energy > 0.0))
            if measured.size:
                if self.energy is None:
                    self.energy = self._new_energy_regression()
                ye = np.log(energy[measured])
                e_mu, _ = self.energy.update(X, ye, index=index[measured])
                self.energy_errors.add_many(np.exp(e_mu), np.exp(ye))
        self._version += 1

    def error_summary(self) -> dict[str, float | int | None]:
        """Progressive-validation abs % error of time predictions (count, ewma, median, p90,
        mean), plus the energy median where energy was measured."""
        summary = self.errors.summary()
        summary["energy_median_ape"] = self.energy_errors.summary()["median_ape"]
        return summary

    # -- state -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state (a few KB; the energy part only once energy was measured)."""
        return {
            "kind": self.KIND,
            "format": FEATURE_FORMAT,
            "device_class": self.device_class,
            "prior": self.prior.to_dict(),
            "version": self._version,
            "time": self.time.to_dict(),
            "energy": None if self.energy is None else self.energy.to_dict(),
            "errors": self.errors.to_dict(),
            "energy_errors": self.energy_errors.to_dict(),
            "local": self.local.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostModel:
        """Rebuild from `to_dict` output; predictions are identical to the original's.

        A model stored with another feature format (before format 2: no ``format`` key) has
        weights that mean nothing on today's features: it comes back cold (its prior, version
        and error history kept) and relearns from the metric stream.
        """
        model = cls(str(data["device_class"]), PriorDevice.from_dict(data["prior"]))
        if data.get("format") != FEATURE_FORMAT:
            logger.warning(
                "cost model of %s stored with feature format %s (now %s): restarting it cold",
                model.device_class,
                data.get("format", 1),
                FEATURE_FORMAT,
            )
            model.errors = ErrorTracker.from_dict(data["errors"])
            model._version = int(data["version"])
            return model
        model.time = BayesLinReg.from_dict(data["time"])
        model.energy = None if data["energy"] is None else BayesLinReg.from_dict(data["energy"])
        model.errors = ErrorTracker.from_dict(data["errors"])
        model.energy_errors = ErrorTracker.from_dict(data["energy_errors"])
        model.local = LocalResiduals.from_dict(data.get("local"))
        model._version = int(data["version"])
        return model

    def clone(self) -> CostModel:
        """An independent copy with the same learned state (the feature cache is shared:
        it is a pure function of (op, variant) and read-only)."""
        copy = CostModel.from_dict(self.to_dict())
        copy._cache = self._cache
        return copy


def compare_online(
    models: Mapping[str, CostModelLike], rows: Sequence[Row], batch_size: int = 1
) -> dict[str, dict[str, float | int | None]]:
    """Progressive validation of several models on the same rows.

    Each model (a clone: the caller's models are untouched) predicts every row before
    learning it, in batches of ``batch_size``. Returns per model: n, median/p90/mean abs %
    error, RMSE of ln(time), and the share of rows within one predicted log std.
    """
    results: dict[str, dict[str, float | int | None]] = {}
    checked = validate_rows(rows)
    for name, original in models.items():
        model = original.clone()
        ape, log_err, covered = [], [], []
        for start in range(0, len(checked), max(1, batch_size)):
            batch = checked[start : start + max(1, batch_size)]
            for op, variant, exec_ms, _ in batch:
                pred = model.predict_one(op, variant)
                ape.append(100.0 * abs(pred.mean_ms - exec_ms) / exec_ms)
                err = math.log(exec_ms) - pred.log_mean
                log_err.append(err)
                covered.append(abs(err) <= pred.log_std)
            model.learn_many(batch)
        arr = np.asarray(ape)
        results[name] = {
            "n": int(arr.size),
            "median_ape": float(np.median(arr)) if arr.size else None,
            "p90_ape": float(np.quantile(arr, 0.9)) if arr.size else None,
            "mean_ape": float(arr.mean()) if arr.size else None,
            "log_rmse": float(np.sqrt(np.mean(np.square(log_err)))) if arr.size else None,
            "coverage_1sd": float(np.mean(covered)) if arr.size else None,
        }
    return results
