"""Pure functions that turn table contents into the web view's JSON documents.

They take plain values (what the tables hold) and return JSON-ready dicts, so they are unit
tested without a worker; ``app.web`` reads the tables and serves what these return. Numbers
that are not finite become ``None``: JSON has no NaN.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from models.costmodel import CostModel
from models.priors import factor_key
from models.sketch import WindowStats
from models.transfer import fit_transfer

# Features shown by name in a model summary: the size slopes and the roofline prior are the
# ones an operator can read ("time grows like flops^w"); one-hot op kinds are summarised by
# how far they moved from their prior instead.
KEY_FEATURES = ("bias", "prior_log_ms", "work", "precision=fp32", "precision=bf16")
TOP_SHIFTS = 5
# A device is "late" after missing two heartbeats: one lost heartbeat is normal jitter.
LATE_AFTER_HEARTBEATS = 2.0


def finite(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing or not finite."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# --- devices ------------------------------------------------------------------------------
def device_health(device: Mapping[str, Any], now_ms: int, heartbeat_interval_s: float,
                  timeout_s: float) -> str:
    """``ok``, ``late`` (missed heartbeats, not yet dead), ``dead`` or ``stopped`` (left
    cleanly). Only ``ok`` and ``late`` devices are routed to."""
    if device.get("state") == "stopping":
        return "stopped"
    last_seen = finite(device.get("last_seen_ms"))
    if last_seen is None:
        return "dead"
    age_ms = now_ms - last_seen
    if age_ms >= timeout_s * 1000.0:
        return "dead"
    if age_ms > LATE_AFTER_HEARTBEATS * heartbeat_interval_s * 1000.0:
        return "late"
    return "ok"


def device_rows(devices: Iterable[Mapping[str, Any] | None], now_ms: int,
                heartbeat_interval_s: float, timeout_s: float) -> list[dict[str, Any]]:
    """Every known device (live and dead) with ``live``, ``health`` and ``seen_ms_ago``."""
    out = []
    for device in devices:
        if not device:
            continue
        health = device_health(device, now_ms, heartbeat_interval_s, timeout_s)
        last_seen = finite(device.get("last_seen_ms"))
        out.append({**device, "live": health in ("ok", "late"), "health": health,
                    "seen_ms_ago": None if last_seen is None else int(now_ms - last_seen),
                    "capability_count": len(device.get("capabilities") or ())})
    return sorted(out, key=lambda d: (str(d.get("device_class", "")), str(d.get("device_id", ""))))


# --- cost models ------------------------------------------------------------------------------
def model_summary(device_class: str, stored: Mapping[str, Any]) -> dict[str, Any]:
    """Samples, running error, version and a readable summary of the weights of one class's
    cost model (ln ms regressed on op features; see models.costmodel).

    ``coefficients`` gives the named features' posterior mean and std next to their prior;
    ``largest_shifts`` the features whose weight moved most, in prior standard deviations;
    ``uncertainty.learned_fraction`` is 1 - median(posterior std / prior std), floored at 0:
    0 for a cold model (or one whose residual noise came out above the prior's guess), near 1
    once the data pinned the weights down.
    """
    model = CostModel.from_dict(stored)
    regression = model.time
    noise_var = regression.noise_var
    mean = np.asarray(regression.mean, dtype=float)
    std = np.sqrt(np.maximum(np.diag(regression.cov), 0.0) * noise_var)
    prior_mean, prior_std = regression.prior_mean, regression.prior_std
    names = list(CostModel.FEATURE_NAMES)[: mean.size]

    def coefficient(i: int) -> dict[str, Any]:
        return {"feature": names[i], "mean": finite(mean[i]), "std": finite(std[i]),
                "prior_mean": finite(prior_mean[i]), "prior_std": finite(prior_std[i])}

    shift = np.abs(mean - prior_mean) / prior_std
    order = [int(i) for i in np.argsort(-shift)[:TOP_SHIFTS]]
    error = {k: finite(v) if k != "count" else v for k, v in model.error_summary().items()}
    median_ape = error.get("median_ape")
    return {
        "device_class": device_class,
        "kind": stored.get("kind", CostModel.KIND),
        "samples": model.samples,
        "energy_samples": model.energy_samples,
        "version": model.version,
        "prior_device": model.prior.device.name,
        # The prior's rate per precision: a CPU class's executors' measured matmul rates where
        # they reported them (``prior_device`` then ends in ~calibrated), else the guesses.
        "prior_gflops": {p: finite(rate / 1e9)
                         for p, rate in sorted(model.prior.device.peak_flops.items())},
        # How far the class's measured reference kernels bend each kind's roofline work
        # (models/priors.py::PriorDevice.kind_factors), "<point>/<precision>": factor, a point
        # being a kind or "<kind>.large" (its out-of-cache reference op).
        "prior_kind_factors": {factor_key(kind, precision, nbytes): finite(factor)
                               for kind, precision, factor, nbytes in model.prior.kind_factors},
        # What each timed activation adds per element, in ns, "<activation>/<precision>"
        # (models/priors.py::PriorDevice.activation_s, from the reference linear with it).
        "prior_activation_ns": {f"{name}/{precision}": finite(seconds * 1e9)
                                for name, precision, seconds in model.prior.activation_s},
        # Its per-call overhead: measured by its executors (models/priors.py::DISPATCH_OP)
        # where they reported it, else the runtime's guess.
        "prior_overhead_us": finite(model.prior.device.launch_overhead_s * 1e6),
        "error": error,
        "error_ratio": None if median_ape is None else median_ape / 100.0,
        "coefficients": {names[i]: coefficient(i) for i in range(len(names))
                         if names[i] in KEY_FEATURES},
        "largest_shifts": [{**coefficient(i), "shift_prior_std": finite(shift[i])}
                           for i in order],
        "uncertainty": {
            "noise_std_log": finite(math.sqrt(noise_var)),
            "learned_fraction": finite(max(0.0, 1.0 - float(np.median(std / prior_std)))),
            "drift_events": int(regression.drift_events),
        },
        # Mean one-time setup of a new shape (build/compile + warm-up), per mode and per
        # (op kind, mode): what the policy charges a class for a shape it has not run yet.
        "setup_ms": {key: finite(float(entry["ms"]))
                     for key, entry in sorted((stored.get("setup") or {}).items())},
        # The class's measured transfers over its link, as the line ms = a + b * MB fitted
        # to them alone (the decider also leans on the declared link: models/transfer.py);
        # None for a class that never measured one.
        "transfer": transfer_summary(stored.get("transfer")),
    }


def transfer_summary(stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The fitted transfer line of a class's measured rows, or None without any."""
    fit = fit_transfer(None, stored)
    if fit is None:
        return None
    return {"a_ms": finite(fit.a_ms), "b_ms_per_mb": finite(fit.b_ms_per_mb),
            "rows": fit.rows, "last_ms": finite((stored or {}).get("last_ms"))}


# --- windows ----------------------------------------------------------------------------------
def _window_entries(items: Iterable[tuple[Any, Any]],
                    ) -> Iterable[tuple[str, str, float, float, dict[str, Any]]]:
    """(class, op kind, start, end, stats dict) of each stored window key ``(key, (s, e))``."""
    for stored_key, value in items:
        try:
            key, (start, end) = stored_key
        except (TypeError, ValueError):
            continue
        if value:
            device_class, _, kind = str(key).partition("|")
            yield device_class, kind, float(start), float(end), value


def latest_windows(name: str, items: Iterable[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """The newest window of each (class, op kind), with its count and percentiles."""
    latest: dict[tuple[str, str], tuple[float, float, dict[str, Any]]] = {}
    for device_class, kind, start, end, value in _window_entries(items):
        held = latest.get((device_class, kind))
        if held is None or held[1] < end:
            latest[(device_class, kind)] = (start, end, value)
    out = []
    for (device_class, kind), (start, end, value) in sorted(latest.items()):
        summary = {k: finite(v) if k not in ("count", "errors") else v
                   for k, v in WindowStats.from_dict(value).summary().items()}
        out.append({"window": name, "device_class": device_class, "op_kind": kind,
                    "start": start, "end": end, **summary})
    return out


def class_window_series(items: Iterable[tuple[Any, Any]], window_s: float) -> dict[str, Any]:
    """Per class, per tumbling window: executions, errors, throughput and merged percentiles.

    A class's windows all live on one worker (metrics are partitioned by class), so series of
    several workers are disjoint in classes and merge by concatenation.
    """
    merged: dict[str, dict[float, WindowStats]] = defaultdict(dict)
    for device_class, _, start, _, value in _window_entries(items):
        stats = WindowStats.from_dict(value)
        held = merged[device_class].get(start)
        if held is None:
            merged[device_class][start] = stats
        else:
            held.merge(stats)
    series: dict[str, list[dict[str, Any]]] = {}
    for device_class, windows in sorted(merged.items()):
        rows = []
        for start, stats in sorted(windows.items()):
            summary = stats.summary()
            rows.append({"t": start, "count": stats.count, "errors": stats.errors,
                         "per_s": stats.count / window_s,
                         "p50_ms": finite(summary["p50_ms"]), "p95_ms": finite(summary["p95_ms"]),
                         "p99_ms": finite(summary["p99_ms"])})
        series[device_class] = rows
    return series


# --- decisions --------------------------------------------------------------------------------
def recent_decisions(decisions: Iterable[Mapping[str, Any] | None],
                     limit: int) -> list[dict[str, Any]]:
    """The ``limit`` newest of the given decisions, newest first."""
    recent = [dict(d) for d in decisions if d]
    recent.sort(key=lambda d: d.get("decided_at_ms", 0), reverse=True)
    return recent[:limit]


def abs_pct_error(predicted: Any, measured: Any) -> float | None:
    """|predicted - measured| / measured in percent; None unless both are positive numbers."""
    p, m = finite(predicted), finite(measured)
    if p is None or m is None or m <= 0:
        return None
    return 100.0 * abs(p - m) / m


def decision_series(decisions: Iterable[Mapping[str, Any]], bucket_ms: int) -> dict[str, Any]:
    """Decisions bucketed by decision time: per class, routing share and the model's error.

    Columnar (``t`` in seconds, then one list per class) so a chart plots it directly.
    ``error_pct`` is the median absolute % error of predicted vs measured time over the
    bucket's completed decisions; ``predicted_ms``/``measured_ms`` are their medians.
    """
    buckets: dict[int, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for decision in decisions:
        decided = finite(decision.get("decided_at_ms"))
        if decided is None:
            continue
        buckets[int(decided // bucket_ms) * bucket_ms][str(decision.get("device_class"))].append(
            decision)
    classes = sorted({c for per_class in buckets.values() for c in per_class})
    times = sorted(buckets)
    out: dict[str, Any] = {"t": [t / 1000.0 for t in times], "classes": classes,
                           "count": {}, "share": {}, "error_pct": {}, "predicted_ms": {},
                           "measured_ms": {}}

    def median(values: list[float]) -> float | None:
        return float(np.median(values)) if values else None

    for device_class in classes:
        for name in ("count", "share", "error_pct", "predicted_ms", "measured_ms"):
            out[name][device_class] = []
        for t in times:
            members = buckets[t].get(device_class, [])
            total = sum(len(v) for v in buckets[t].values())
            done = [d for d in members if finite(d.get("measured_ms")) is not None]
            errors = [e for d in done if (e := abs_pct_error(d.get("predicted_ms"),
                                                             d.get("measured_ms"))) is not None]
            out["count"][device_class].append(len(members))
            out["share"][device_class].append(100.0 * len(members) / total if total else 0.0)
            out["error_pct"][device_class].append(median(errors))
            out["predicted_ms"][device_class].append(
                median([float(d["predicted_ms"]) for d in done]))
            out["measured_ms"][device_class].append(
                median([float(d["measured_ms"]) for d in done]))
    return out


def decision_error_by_class(decisions: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per class over the given decisions: count, completed, median predicted and measured ms
    and the median absolute % error between them."""
    grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for decision in decisions:
        grouped[str(decision.get("device_class"))].append(decision)
    out = {}
    for device_class, members in sorted(grouped.items()):
        done = [d for d in members if finite(d.get("measured_ms")) is not None]
        errors = [e for d in done if (e := abs_pct_error(d.get("predicted_ms"),
                                                         d.get("measured_ms"))) is not None]
        out[device_class] = {
            "decisions": len(members), "completed": len(done),
            "predicted_ms_p50": finite(np.median([float(d["predicted_ms"]) for d in done]))
            if done else None,
            "measured_ms_p50": finite(np.median([float(d["measured_ms"]) for d in done]))
            if done else None,
            "error_pct_p50": finite(np.median(errors)) if errors else None,
        }
    return out


