"""A scikit-learn online comparator for `models.costmodel.CostModel`.

`SGDCostModel` fits ``SGDRegressor.partial_fit`` on the same features, standardised online
(``StandardScaler.partial_fit``), predicting the residual of ln(time) over the class's roofline
prior, so it starts where the Bayesian model starts and the comparison is about how each learns.
SGD has no posterior: its spread is the running residual std, shrunk with sample count as a
stand-in for parameter uncertainty in Thompson samples.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDRegressor
from sklearn.preprocessing import StandardScaler

from models.costmodel import Prediction, Row, validate_rows
from models.features import N_FEATURES, PRIOR_INDEX, featurize
from models.ops import OpSpec, Variant
from models.priors import PriorDevice, prior_for_class
from models.regression import ErrorTracker

__all__ = ["SGDCostModel"]

# Initial residual std (ln units) before any row: the simulator's noise is ~10 %; live
# timings jitter ~20-30 % (the Bayesian model's prior noise was this too until its live
# value became a prior-strength setting; models/costmodel.py NOISE_STD).
INITIAL_RESIDUAL_STD: dict[str, float] = {"sim": 0.15, "live": 0.3}

# Settings picked by progressive validation on synthetic roofline worlds (sim-h100-like and a
# live-CPU-like one, 1,500 mixed ops): a constant step follows drift where invscaling decays
# too fast; eta0 0.03 was the most accurate of 0.001/0.003/0.01/0.03 (0.01 within 5%).
SGD_PARAMS: dict[str, Any] = {
    "loss": "squared_error",
    "penalty": "l2",
    "alpha": 1e-4,
    "learning_rate": "constant",
    "eta0": 0.03,
    "random_state": 0,
}
# EWMA weight of the squared residual (memory ~50 rows, like the Bayesian model's noise).
RESIDUAL_ALPHA = 0.02


class SGDCostModel:
    """Online SGD regression of ln(time) (and ln(energy)) over the roofline prior."""

    KIND = "sgd"

    def __init__(
        self, device_class: str, prior: PriorDevice | None = None, **sgd_params: Any
    ) -> None:
        self.device_class = device_class
        self.prior = prior or prior_for_class(device_class)
        self.params = {**SGD_PARAMS, **sgd_params}
        self.scaler = StandardScaler()
        self.time = SGDRegressor(**self.params)
        self.energy = SGDRegressor(**self.params)
        self.time_rows = 0
        self.energy_rows = 0
        self.residual_var = INITIAL_RESIDUAL_STD[self.prior.scale] ** 2
        self.energy_residual_var = (1.5 * INITIAL_RESIDUAL_STD[self.prior.scale]) ** 2
        self.errors = ErrorTracker()
        self._version = 0

    @classmethod
    def for_class(cls, device_class: str, **options: Any) -> SGDCostModel:
        """A cold comparator for ``device_class`` (options: SGDRegressor parameters)."""
        return cls(device_class, **options)

    @property
    def version(self) -> int:
        """Increments on every learn call."""
        return self._version

    @property
    def samples(self) -> int:
        """Rows of execution time learned."""
        return self.time_rows

    def _x(self, op: OpSpec, variant: Variant) -> np.ndarray:
        return featurize(op, variant, self.prior.roofline_log_ms(op, variant))

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self.scaler, "mean_"):
            return np.zeros_like(X)
        return self.scaler.transform(X)

    def _log_time(self, X: np.ndarray) -> np.ndarray:
        base = X[:, PRIOR_INDEX]
        if not self.time_rows:
            return base
        return base + self.time.predict(self._scaled(X))

    def _energy_offset(self) -> float:
        return math.log(self.prior.busy_power_w / 1e3)

    def _spread_var(self) -> float:
        # Parameter uncertainty shrinks like 1/n relative to the residual variance.
        return self.residual_var * N_FEATURES / (N_FEATURES + self.time_rows)

    def predict_one(self, op: OpSpec, variant: Variant) -> Prediction:
        """Prior + learned residual; spread from the running residual variance."""
        X = self._x(op, variant)[None, :]
        mu = float(self._log_time(X)[0])
        var = self.residual_var + self._spread_var()
        energy_j = energy_std = None
        if self.energy_rows:
            e_mu = float(
                X[0, PRIOR_INDEX] + self._energy_offset() + self.energy.predict(self._scaled(X))[0]
            )
            energy_j = math.exp(e_mu)
            energy_std = energy_j * math.sqrt(math.expm1(self.energy_residual_var))
        return Prediction(
            mean_ms=math.exp(mu),
            std_ms=math.exp(mu) * math.sqrt(math.expm1(min(var, 50.0))),
            energy_j=energy_j,
            energy_std_j=energy_std,
            samples=self.time_rows,
            log_mean=mu,
            log_std=math.sqrt(var),
        )

    def sample_ms(self, op: OpSpec, variant: Variant, rng: np.random.Generator) -> float:
        """A draw of the expected time with the shrinking stand-in parameter spread."""
        mu = float(self._log_time(self._x(op, variant)[None, :])[0])
        return math.exp(mu + math.sqrt(self._spread_var()) * float(rng.standard_normal()))

    def learn_one(
        self, op: OpSpec, variant: Variant, exec_ms: float, energy_j: float | None = None
    ) -> None:
        """Learn one measured execution."""
        self.learn_many([(op, variant, exec_ms, energy_j)])

    def learn_many(self, rows: Iterable[Row]) -> None:
        """Predict each row (progressive error), then ``partial_fit`` scaler and regressors."""
        batch = validate_rows(rows)
        if not batch:
            return
        X = np.stack([self._x(op, variant) for op, variant, _, _ in batch])
        y = np.log([r[2] for r in batch])
        before = self._log_time(X)
        self.errors.add_many(np.exp(before), np.exp(y))
        for err in (y - before).tolist():
            self.residual_var += RESIDUAL_ALPHA * (err * err - self.residual_var)
        self.scaler.partial_fit(X)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.time.partial_fit(self._scaled(X), y - X[:, PRIOR_INDEX])
            measured = [i for i, r in enumerate(batch) if r[3] is not None]
            if measured:
                Xe = X[measured]
                target = (
                    np.log(np.array([batch[i][3] for i in measured], dtype=np.float64))
                    - Xe[:, PRIOR_INDEX]
                    - self._energy_offset()
                )
                if self.energy_rows:
                    resid = target - self.energy.predict(self._scaled(Xe))
                    for err in resid.tolist():
                        self.energy_residual_var += RESIDUAL_ALPHA * (
                            err * err - self.energy_residual_var
                        )
                self.energy.partial_fit(self._scaled(Xe), target)
                self.energy_rows += len(measured)
        self.time_rows += len(batch)
        self._version += 1

    def error_summary(self) -> dict[str, float | int | None]:
        """Progressive-validation abs % error (count, ewma, median, p90, mean)."""
        return self.errors.summary()

    # -- state -----------------------------------------------------------------------------
    @staticmethod
    def _sgd_state(reg: SGDRegressor) -> dict[str, Any] | None:
        if not hasattr(reg, "coef_"):
            return None
        return {"coef": reg.coef_.tolist(), "intercept": reg.intercept_.tolist(), "t": reg.t_}

    def _restore_sgd(self, state: Mapping[str, Any] | None) -> SGDRegressor:
        reg = SGDRegressor(**self.params)
        if state is not None:
            reg.coef_ = np.asarray(state["coef"], dtype=np.float64)
            reg.intercept_ = np.asarray(state["intercept"], dtype=np.float64)
            reg.t_ = float(state["t"])
            reg.n_features_in_ = N_FEATURES
        return reg

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state (coefficients, scaler statistics, counters)."""
        scaler = None
        if hasattr(self.scaler, "mean_"):
            scaler = {
                "mean": self.scaler.mean_.tolist(),
                "var": self.scaler.var_.tolist(),
                "scale": self.scaler.scale_.tolist(),
                "n": int(self.scaler.n_samples_seen_),
            }
        return {
            "kind": self.KIND,
            "device_class": self.device_class,
            "prior": self.prior.to_dict(),
            "params": dict(self.params),
            "version": self._version,
            "time_rows": self.time_rows,
            "energy_rows": self.energy_rows,
            "residual_var": self.residual_var,
            "energy_residual_var": self.energy_residual_var,
            "scaler": scaler,
            "time": self._sgd_state(self.time),
            "energy": self._sgd_state(self.energy),
            "errors": self.errors.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SGDCostModel:
        """Rebuild from `to_dict` output; predictions and further learning are identical."""
        model = cls(
            str(data["device_class"]), PriorDevice.from_dict(data["prior"]), **data["params"]
        )
        if data["scaler"] is not None:
            s = data["scaler"]
            model.scaler.mean_ = np.asarray(s["mean"], dtype=np.float64)
            model.scaler.var_ = np.asarray(s["var"], dtype=np.float64)
            model.scaler.n_samples_seen_ = np.int64(s["n"])  # sklearn wants a NumPy scalar
            model.scaler.scale_ = np.asarray(s["scale"], dtype=np.float64)
            model.scaler.n_features_in_ = N_FEATURES
        model.time = model._restore_sgd(data["time"])
        model.energy = model._restore_sgd(data["energy"])
        model.time_rows = int(data["time_rows"])
        model.energy_rows = int(data["energy_rows"])
        model.residual_var = float(data["residual_var"])
        model.energy_residual_var = float(data["energy_residual_var"])
        model.errors = ErrorTracker.from_dict(data["errors"])
        model._version = int(data["version"])
        return model

    def clone(self) -> SGDCostModel:
        """An independent copy with the same learned state."""
        return SGDCostModel.from_dict(self.to_dict())
