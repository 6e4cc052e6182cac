"""Bayesian linear regression with stabilised forgetting, and progressive-validation errors.

`BayesLinReg` is Bayesian linear regression in information form: precision ``P`` and
information vector ``eta = P @ mean``, both in units of the noise variance (the
Normal-Inverse-Gamma convention), so the prior is worth a fixed number of pseudo-rows whatever
the noise level. Forgetting is *stabilised* (Kulhavy and Zarrop, 1993): before each row the
statistics are pulled toward their prior values,

    stat <- lam * stat + (1 - lam) * stat_prior + contribution(row),

so old evidence fades with memory ``~1/(1 - lam)`` rows, yet directions that are no longer
excited relax to the prior instead of blowing up (the "wind-up" of plain exponential RLS).
The update is linear in the statistics, so a batch of n rows is n sequential updates: row i
enters with weight ``lam**(n-1-i)`` and the prior with ``1 - lam**n``. The metric path can
therefore learn in batches at NumPy speed. (Only the robustness weights below depend on a
prediction; inside a batch they use the prediction from the start of the row's chunk, so batch
and sequential learning agree to within a few percent rather than exactly.)

The noise variance is estimated from *innovations* (progressive residuals ``e`` standardised
by their own predicted spread, ``e^2 / (1 + x' V x)``), which has the right expectation whether
the prediction came from the model one row ago or one batch ago; that keeps the uncertainty
calibrated and batch learning close to sequential.

Abrupt drift (a device that slows down 4x) shows as a run of standardised residuals of one
sign. An EWMA of them crossing a threshold injects variance on the bias weight (a Kalman
random-walk step, by Sherman-Morrison in information form): every prediction becomes unsure by
the size of the shift, and the next row moves the bias by nearly the whole residual while the
learned size/kind/precision corrections are kept. Slow drift is followed by the forgetting.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

# scipy comes with scikit-learn (a dependency): NumPy has no Cholesky or triangular solve.
# The LAPACK routines themselves: scipy.linalg's wrappers cost more than the 73 x 73 solve.
from scipy.linalg.lapack import dpotrf, dpotrs, dtrtrs

__all__ = ["BayesLinReg", "ErrorTracker"]

# Floor on the noise variance (log-space): 1e-6 is a 0.1% timing jitter, below any real clock.
MIN_NOISE_VAR = 1e-6
# Cap on one row's squared standardised innovation in the noise estimate: a single outlier
# (a GC pause, a page fault storm) may widen the noise by at most 25 rows' worth.
MAX_Z2 = 25.0
# Standardised residuals enter the drift statistic clipped to +-3, so one outlier (|z| >> 3)
# moves the EWMA by at most 0.9 < threshold: a shift needs two or more rows to be believed.
Z_CLIP = 3.0
# Huber weight k/|z| for rows beyond k = 2.5 predictive stds: bounded influence of timing
# spikes (contention, page faults) on the weights; ~1% of Gaussian rows are touched.
HUBER_K = 2.5


def ewma_path(values: np.ndarray, start: float, alpha: float) -> np.ndarray:
    """The EWMA after each of ``values`` (``s <- s + alpha (v - s)`` from ``start``), in
    NumPy: ``s_j = keep^(j+1) start + alpha sum_i keep^(j-i) v_i`` with ``keep = 1 - alpha``,
    as a cumulative sum of ``v_i keep^-(i+1)`` (exact to rounding while ``keep^-n`` stays far from
    overflow; longer or faster-decaying runs go in pieces)."""
    keep = 1.0 - alpha
    if keep <= 0.0:
        return np.array(values, dtype=np.float64)
    out = np.empty(values.size)
    step = values.size if keep**values.size > 1e-200 else max(1, int(-200 / np.log10(keep)))
    level = float(start)
    for begin in range(0, values.size, step):
        part = values[begin:begin + step]
        powers = keep ** np.arange(1, part.size + 1, dtype=np.float64)  # keep^(j+1)
        scaled = np.cumsum(part / powers)  # v_i keep^-(i+1)
        out[begin:begin + part.size] = powers * level + alpha * powers * scaled
        level = float(out[begin + part.size - 1])
    return out


class BayesLinReg:
    """Online Bayesian linear regression with stabilised forgetting and drift detection."""

    # A batch is predicted in chunks no longer than the model's age (8 <= chunk <= 256 rows):
    # a young model's predictions go stale fastest, and refreshing costs one d x d inverse.
    CHUNK_MIN = 8
    CHUNK_MAX = 256

    def __init__(
        self,
        prior_mean: np.ndarray,
        prior_std: np.ndarray,
        noise_std: float,
        *,
        forgetting: float = 0.99,
        noise_dof: float = 4.0,
        drift_alpha: float = 0.3,
        drift_threshold: float = 1.5,
        bias_index: int = 0,
        huber_k_slow: float = HUBER_K,
    ) -> None:
        """Start at the prior ``N(prior_mean, diag(prior_std^2))`` on the weights.

        ``noise_std`` is the prior guess of the residual std, worth ``noise_dof`` rows.
        ``forgetting`` is lambda (memory ~1/(1-lambda) rows). When the EWMA (weight
        ``drift_alpha``) of standardised residuals exceeds ``drift_threshold`` in absolute
        value, variance is injected on weight ``bias_index``. ``huber_k_slow`` is the Huber
        threshold for rows *above* the prediction (`HUBER_K` both ways by default).
        """
        self.prior_mean = np.asarray(prior_mean, dtype=np.float64).copy()
        self.prior_std = np.asarray(prior_std, dtype=np.float64).copy()
        if self.prior_mean.shape != self.prior_std.shape or self.prior_mean.ndim != 1:
            raise ValueError("prior mean and std must be 1-d arrays of the same length")
        if np.any(self.prior_std <= 0) or noise_std <= 0:
            raise ValueError("prior and noise std must be positive")
        if not 0.0 < forgetting <= 1.0:
            raise ValueError("forgetting must be in (0, 1]")
        self.noise_std = float(noise_std)
        self.forgetting = float(forgetting)
        self.noise_dof = float(noise_dof)
        self.drift_alpha = float(drift_alpha)
        self.drift_threshold = float(drift_threshold)
        self.bias_index = int(bias_index)
        self.huber_k_slow = float(huber_k_slow)
        # Prior precision relative to the prior noise variance (NIG convention).
        self._p0 = self.noise_std**2 / self.prior_std**2
        self._prior_var = self.prior_std**2  # the weights' prior variance (`moments`' cap)
        self._eta0 = self._p0 * self.prior_mean
        self._p0_matrix = np.diag(self._p0)
        self.precision = np.diag(self._p0)
        self.eta = self._eta0.copy()
        self.innov_sum = self.noise_dof * self.noise_std**2  # decayed sum of e^2/(1+q)
        self.innov_weight = self.noise_dof  # decayed count behind innov_sum
        self.drift = 0.0  # EWMA of standardised residuals
        self.shift = 0.0  # EWMA of raw residuals: the size of a detected shift
        self.rows = 0
        self.drift_events = 0
        self._mean: np.ndarray | None = None
        self._cov: np.ndarray | None = None

    @property
    def dim(self) -> int:
        """Number of weights."""
        return int(self.prior_mean.size)

    # -- posterior -------------------------------------------------------------------------
    def _refresh(self) -> None:
        # One inverse per update (not per prediction): d is ~20, so this is ~20 µs, and every
        # predict afterwards is two dot products.
        cov = np.linalg.inv(self.precision)
        cov = 0.5 * (cov + cov.T)
        self._cov, self._mean = cov, cov @ self.eta

    @property
    def mean(self) -> np.ndarray:
        """Posterior mean of the weights."""
        if self._mean is None:
            self._refresh()
        assert self._mean is not None
        return self._mean

    @property
    def cov(self) -> np.ndarray:
        """Posterior covariance of the weights, in units of the noise variance."""
        if self._cov is None:
            self._refresh()
        assert self._cov is not None
        return self._cov

    @property
    def noise_var(self) -> float:
        """Current estimate of the residual variance."""
        return max(self.innov_sum / self.innov_weight, MIN_NOISE_VAR)

    def moments(self, x: np.ndarray) -> tuple[float, float, float]:
        """(predicted mean, variance of the mean, noise variance) at feature vector ``x``.

        The variance of the mean is at most the prior's at ``x`` (``sum x_i^2 prior_std_i^2``):
        in this conjugate form the weights' covariance is the noise variance times ``cov``, so
        a class whose timings are noisy (its noise estimate 5x the prior's) had weights *less*
        certain than before any data in every direction its rows had not pinned down. On the
        live bf16 set (2026-12-07) JAX's ~17 rows, a noise std of 0.4 ln units, gave the
        widest cold features (a compiled bf16 MLP) a weight std of ~7 ln units (a factor of
        1,000), and Thompson draws sent ~26 of 176 workloads to JAX compilations of 80-250
        ms for ops torch ran in 5-20. Data never makes the weights less known than the prior
        said; the noise itself stays in the predictive variance. (Learning reads
        `moments_many`, uncapped: the update is the conjugate one.)
        """
        mean, cov, noise = self.mean, self.cov, self.noise_var
        spread = float(x @ cov @ x)
        prior = float((x * x) @ self._prior_var)
        return float(x @ mean), min(noise * max(spread, 0.0), prior), noise

    def moments_many(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """`moments` for the rows of ``X``, the variance of the mean *not* capped at the
        prior's: what learning reads (its Huber weights and noise update are the conjugate
        ones); predictions read `moments`."""
        mean, cov, noise = self.mean, self.cov, self.noise_var
        # (X @ cov) is a BLAS product; the three-operand einsum this replaces ran a naive
        # loop, a quarter of the metric path's CPU (8 µs a row at 73 features).
        spread = np.einsum("ij,ij->i", X @ cov, X)
        return X @ mean, noise * np.maximum(spread, 0.0), noise

    def _solved_mean(self) -> np.ndarray:
        """The posterior mean, by Cholesky solve when it is not known yet (no inverse: the
        statistics change again right after)."""
        if self._mean is not None:
            return self._mean
        factor, info = dpotrf(self.precision, lower=1, clean=1)
        if info != 0:
            return self.mean
        mean, info = dpotrs(factor, self.eta, lower=1)
        return np.asarray(mean) if info == 0 else self.mean

    def _chunk_moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """`moments_many` for the rows of a chunk being learned. The posterior changes after
        every chunk, so rather than invert the precision (as `_refresh` does for the
        predictions that follow) this solves with its Cholesky factor: mean = P^-1 eta and
        spread x' P^-1 x = |L^-1 x|^2, a third of the inverse's cost at 73 features, the same
        figures to rounding. A precision that is not positive definite in floating point
        falls back to the inverse."""
        if self._cov is not None:
            return self.moments_many(X)
        factor, info = dpotrf(self.precision, lower=1, clean=1)
        if info != 0:  # not positive definite in floating point
            return self.moments_many(X)
        mean, info_mean = dpotrs(factor, self.eta, lower=1)
        half, info_half = dtrtrs(factor, X.T, lower=1)
        if info_mean != 0 or info_half != 0:
            return self.moments_many(X)
        noise = self.noise_var
        return X @ mean, noise * np.einsum("ij,ij->j", half, half), noise

    # -- learning --------------------------------------------------------------------------
    def update(
        self, X: np.ndarray, y: np.ndarray, index: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Learn rows ``X`` (n x d) with targets ``y``; returns the predictions made *before*
        learning each row (mean and total predictive std), for progressive validation.

        With ``index`` (n ints), ``X`` holds distinct feature vectors (u x d) and row i is
        ``X[index[i]]``: the same result as ``update(X[index], y)``, with the d x d work done
        once per distinct vector and chunk instead of once per row (a fleet runs few distinct
        shapes, so a metric batch of thousands of rows has a handful).

        Rows are predicted from the model as it stood at the start of their chunk (chunks
        grow with the model's age, see `CHUNK_MIN`/`CHUNK_MAX`, and end at a drift event).
        Rows beyond `HUBER_K` predictive stds below, or ``huber_k_slow`` above, the
        prediction are down-weighted (Huber); the result equals
        sequential learning exactly when no row is, and closely otherwise.
        """
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        y = np.atleast_1d(np.asarray(y, dtype=np.float64))
        if index is not None:
            index = np.asarray(index, dtype=np.intp)
            if index.ndim != 1 or (index.size and (index.min() < 0
                                                   or index.max() >= X.shape[0])):
                raise ValueError(f"index must be n ints in [0, {X.shape[0]})")
        rows_in = X.shape[0] if index is None else index.shape[0]
        if rows_in != y.shape[0] or X.shape[1] != self.dim:
            raise ValueError(f"expected X (n, {self.dim}) and y (n,), got {X.shape}, {y.shape}")
        if not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError("features and targets must be finite")
        n = y.size
        mu_out, sd_out = np.empty(n), np.empty(n)
        start = 0
        while start < n:
            chunk = min(max(self.rows + start, self.CHUNK_MIN), self.CHUNK_MAX)
            end = min(n, start + chunk)
            if index is None:
                Xs, inv = X[start:end], None
                mu, param_var, noise = self._chunk_moments(Xs)
            else:
                # The chunk's distinct vectors (in index order) and each row's rank among
                # them: a mask over X's rows rather than a sort.
                part = index[start:end]
                present = np.zeros(X.shape[0], dtype=bool)
                present[part] = True
                Xs = X[present]
                inv = (np.cumsum(present) - 1)[part]
                mu_s, var_s, noise = self._chunk_moments(Xs)
                mu, param_var = mu_s[inv], var_s[inv]
            sd = np.sqrt(param_var + noise)
            resid = y[start:end] - mu
            z = resid / sd
            # The drift and shift EWMAs after each row; the chunk ends at the first row whose
            # drift statistic crosses the threshold.
            drift = ewma_path(np.clip(z, -Z_CLIP, Z_CLIP), self.drift, self.drift_alpha)
            crossed = np.flatnonzero(np.abs(drift) > self.drift_threshold)
            fired = int(crossed[0]) if crossed.size else -1
            stop = end if fired < 0 else start + fired + 1
            count = stop - start
            shift = ewma_path(resid[:count], self.shift, self.drift_alpha)
            self.drift, self.shift = float(drift[count - 1]), float(shift[count - 1])
            mu_out[start:stop], sd_out[start:stop] = mu[:count], sd[:count]
            self._learn_noise(np.minimum(z[:count] ** 2, MAX_Z2) * noise, param_var[:count] / noise)
            k = np.where(z[:count] > 0.0, self.huber_k_slow, HUBER_K)
            robust = np.minimum(1.0, k / np.maximum(np.abs(z[:count]), 1e-12))
            rows = None if inv is None else inv[:count]
            if fired < 0:
                self._learn_rows(Xs, rows, y[start:stop], robust)
            else:
                head = None if rows is None else rows[:-1]
                last = None if rows is None else rows[-1:]
                self._learn_rows(Xs if rows is not None else Xs[: count - 1], head,
                                 y[start : stop - 1], robust[:-1])
                self._inject_bias_variance(max(abs(self.shift), abs(float(resid[fired]))) ** 2)
                # The row that revealed the shift is trusted in full: it is the new level.
                self._learn_rows(Xs if rows is not None else Xs[count - 1 : count], last,
                                 y[stop - 1 : stop], np.ones(1))
            start = stop
        self.rows += n
        return mu_out, sd_out

    def _learn_noise(self, standardised_sq: np.ndarray, spread: np.ndarray) -> None:
        """Fold innovations ``e^2 / (1 + q)`` into the noise estimate.

        Each row is weighted by ``1 / (1 + q)``: when the weights are unsure (q >> 1) the
        residual says little about the noise. Plain exponential forgetting here (no pull to
        the prior): the noise is a scalar seen on every row, so it cannot wind up.
        """
        k = standardised_sq.size
        decay = self.forgetting ** np.arange(k - 1, -1, -1, dtype=np.float64)
        weight = decay / (1.0 + spread)
        total = self.forgetting**k
        self.innov_sum = total * self.innov_sum + float(weight @ standardised_sq)
        self.innov_weight = total * self.innov_weight + float(weight.sum())

    def _learn_rows(self, X: np.ndarray, rows: np.ndarray | None, y: np.ndarray,
                    row_weight: np.ndarray) -> None:
        """Fold rows into the statistics: row i is ``X[i]``, or ``X[rows[i]]`` (then the
        weights of rows sharing a vector are summed first: one d x d product per vector)."""
        k = y.size
        if k == 0:
            return
        decay = self.forgetting ** np.arange(k - 1, -1, -1, dtype=np.float64)
        total = self.forgetting**k
        weight = decay * row_weight
        if rows is not None:
            size = X.shape[0]
            target = np.bincount(rows, weights=weight * y, minlength=size)
            weight = np.bincount(rows, weights=weight, minlength=size)
        else:
            target = weight * y
        weighted = X * weight[:, None]
        precision = total * self.precision + weighted.T @ X
        # Exactly symmetric, so the upper triangle stored by to_dict restores it bit for bit.
        self.precision = 0.5 * (precision + precision.T) + (1.0 - total) * self._p0_matrix
        self.eta = total * self.eta + (1.0 - total) * self._eta0 + X.T @ target
        self._mean = self._cov = None

    def _inject_bias_variance(self, variance: float) -> None:
        """Add ``variance`` (target units^2) to the bias weight, keeping the mean."""
        mean = self._solved_mean()
        c = variance / self.noise_var  # relative units, like the precision
        column = self.precision[:, self.bias_index].copy()
        self.precision = self.precision - np.outer(column, column) * (
            c / (1.0 + c * column[self.bias_index])
        )
        self.eta = self.precision @ mean
        self._mean = self._cov = None
        self.drift = 0.0
        self.shift = 0.0
        self.drift_events += 1

    # -- state -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state; the precision matrix is stored as its upper triangle."""
        return {
            "prior_mean": self.prior_mean.tolist(),
            "prior_std": self.prior_std.tolist(),
            "noise_std": self.noise_std,
            "forgetting": self.forgetting,
            "noise_dof": self.noise_dof,
            "drift_alpha": self.drift_alpha,
            "drift_threshold": self.drift_threshold,
            "bias_index": self.bias_index,
            "huber_k_slow": self.huber_k_slow,
            "precision_upper": self.precision[np.triu_indices(self.dim)].tolist(),
            "eta": self.eta.tolist(),
            "innov_sum": self.innov_sum,
            "innov_weight": self.innov_weight,
            "drift": self.drift,
            "shift": self.shift,
            "rows": self.rows,
            "drift_events": self.drift_events,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BayesLinReg:
        """Rebuild from `to_dict` output (exactly: predictions are bit-identical)."""
        reg = cls(
            np.asarray(data["prior_mean"]),
            np.asarray(data["prior_std"]),
            float(data["noise_std"]),
            forgetting=float(data["forgetting"]),
            noise_dof=float(data["noise_dof"]),
            drift_alpha=float(data["drift_alpha"]),
            drift_threshold=float(data["drift_threshold"]),
            bias_index=int(data["bias_index"]),
            huber_k_slow=float(data.get("huber_k_slow", HUBER_K)),
        )
        d = reg.dim
        precision = np.zeros((d, d))
        precision[np.triu_indices(d)] = np.asarray(data["precision_upper"], dtype=np.float64)
        reg.precision = precision + np.triu(precision, 1).T
        reg.eta = np.asarray(data["eta"], dtype=np.float64)
        reg.innov_sum = float(data["innov_sum"])
        reg.innov_weight = float(data["innov_weight"])
        reg.drift = float(data["drift"])
        reg.shift = float(data["shift"])
        reg.rows = int(data["rows"])
        reg.drift_events = int(data["drift_events"])
        return reg


class ErrorTracker:
    """Running progressive-validation error: an EWMA and a bounded ring of abs % errors."""

    # 0.05: the EWMA reflects roughly the last 20 predictions, fast enough to show drift.
    EWMA_ALPHA = 0.05
    # 128 recent errors: enough for a stable median/p90, small in a table value (~1.5 KB).
    RING_SIZE = 128

    def __init__(self) -> None:
        self.count = 0
        self.ewma: float | None = None
        self.ring: deque[float] = deque(maxlen=self.RING_SIZE)

    def add_many(self, predicted: np.ndarray, actual: np.ndarray) -> None:
        """Record abs % errors of predictions against actual values (both > 0)."""
        ape = np.ravel(100.0 * np.abs(np.asarray(predicted) - np.asarray(actual))
                       / np.asarray(actual))
        if not ape.size:
            return
        # The EWMA row by row, in closed form: the newest error weighs alpha, the one before
        # alpha (1 - alpha), ..., the previous EWMA (1 - alpha)^n (the first error ever
        # starts it).
        if self.ewma is None:
            self.ewma, ape_rest = float(ape[0]), ape[1:]
        else:
            ape_rest = ape
        keep = 1.0 - self.EWMA_ALPHA
        powers = keep ** np.arange(ape_rest.size - 1, -1, -1, dtype=np.float64)
        self.ewma = float(keep**ape_rest.size * self.ewma
                          + self.EWMA_ALPHA * (powers @ ape_rest))
        self.ring.extend(ape[-self.RING_SIZE:].tolist())
        self.count += int(ape.size)

    def summary(self) -> dict[str, float | int | None]:
        """count, ewma, and median/p90/mean of the ring, in percent; None when empty."""
        if not self.ring:
            return {
                "count": self.count,
                "ewma_ape": None,
                "median_ape": None,
                "p90_ape": None,
                "mean_ape": None,
            }
        arr = np.fromiter(self.ring, dtype=np.float64)
        return {
            "count": self.count,
            "ewma_ape": self.ewma,
            "median_ape": float(np.median(arr)),
            "p90_ape": float(np.quantile(arr, 0.9)),
            "mean_ape": float(arr.mean()),
        }

    def to_dict(self) -> dict[str, Any]:
        # Four significant digits are plenty for an error figure and halve the JSON size.
        """JSON-ready state: count, EWMA and the (rounded) ring."""
        return {
            "count": self.count,
            "ewma": self.ewma,
            "ring": [float(f"{e:.4g}") for e in self.ring],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ErrorTracker:
        """Rebuild from `to_dict` output."""
        tracker = cls()
        tracker.count = int(data["count"])
        tracker.ewma = None if data["ewma"] is None else float(data["ewma"])
        tracker.ring.extend(float(e) for e in data["ring"])
        return tracker

    def copy(self) -> ErrorTracker:
        """An independent copy."""
        return ErrorTracker.from_dict(self.to_dict())
