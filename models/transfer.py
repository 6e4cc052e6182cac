"""Remote classes: the link an executor sits behind, the bytes a workload sends over it, and
what moving them costs — declared, then learned.

An executor may declare a link (round-trip time and bandwidth, ``Link``) and a price per
device-hour; its heartbeats carry both. The bytes a workload moves are its real bytes
(``transfer_bytes``): its inline input tensors as sent (or, without inline inputs, the op's
inputs at its dtype: the data a client would have to ship) up, and the op's output at its dtype
down. An executor behind a declared link waits ``Link.transfer_ms`` of them — half the round
trip and the inputs before the execution, half and the output after — and reports the measured
wait as ``transfer_ms`` beside ``exec_ms`` (runtimes/work.py).

Links drift, so the router does not trust the declaration alone: ``TransferFit`` is a per-class
online linear fit ``transfer_ms ≈ a + b · MB`` of the measured (bytes, ms) pairs with
exponential forgetting (``FORGETTING`` per row: ~50 rows of memory), stored beside the class's
cost model by the learn stage. ``predict_transfer_ms`` combines it with the declared link as a
Gaussian prior on (a, b) — mean from the declaration, a standard deviation of half of it — so a
class is charged its declared link until it has measured, and what it measures from then on.
Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.ops import OpSpec

MB = 1e6  # the fit's unit of size: bytes per MB (well-conditioned sums for 1 B – 1 GB)
FORGETTING = 0.98  # weight of the past per new row: a drifting link is followed in ~50 rows
NOISE_MS = 1.0  # residual std assumed per row (ms): the data's weight against the prior
PRIOR_REL_STD = 0.5  # prior std of a and b, relative to the declared link
# Prior of a class that measured transfers but declared no link: almost no information.
VAGUE_STD = (1e3, 1e3)
HOUR_MS = 3.6e6
_DTYPE_BYTES = {"float32": 4, "float16": 2, "float64": 8}


@dataclass(frozen=True)
class Link:
    """A declared link: round-trip time (ms) and bandwidth (megabits per second)."""

    rtt_ms: float
    bandwidth_mbit_s: float

    def __post_init__(self) -> None:
        for name, value, zero_ok in (("rtt_ms", self.rtt_ms, True),
                                     ("bandwidth_mbit_s", self.bandwidth_mbit_s, False)):
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                raise ValueError(f"link {name} must be a finite number "
                                 f"{'>= 0' if zero_ok else '> 0'}, got {value!r}")

    @property
    def bytes_per_ms(self) -> float:
        return self.bandwidth_mbit_s * 1e6 / 8.0 / 1e3

    def transfer_ms(self, up_bytes: float, down_bytes: float = 0.0) -> float:
        """The declared time to send ``up_bytes`` and receive ``down_bytes``: one round trip
        plus the bytes at the bandwidth."""
        return self.rtt_ms + (up_bytes + down_bytes) / self.bytes_per_ms

    def ms_per_mb(self) -> float:
        return MB / self.bytes_per_ms

    def to_dict(self) -> dict[str, float]:
        return {"rtt_ms": float(self.rtt_ms), "bandwidth_mbit_s": float(self.bandwidth_mbit_s)}


def parse_link(value: object) -> Link | None:
    """A heartbeat's ``link`` field: None, or ``{"rtt_ms", "bandwidth_mbit_s"}``; ValueError
    with the reason otherwise (negative bandwidth, missing or unknown keys)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"rtt_ms", "bandwidth_mbit_s"}:
        raise ValueError('link must be null or {"rtt_ms": ms, "bandwidth_mbit_s": Mbit/s}')
    return Link(value["rtt_ms"], value["bandwidth_mbit_s"])


def parse_price(value: object) -> float | None:
    """A heartbeat's ``price_per_hour``: None or a finite number >= 0; ValueError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"price_per_hour must be a finite number >= 0, got {value!r}")
    return float(value)


def op_io_bytes(op: OpSpec) -> tuple[int, int]:
    """(input bytes, output bytes) of ``op`` at its dtype."""
    size = _DTYPE_BYTES[op.dtype]
    up = sum(math.prod(shape) for shape in op.input_shapes().values()) * size
    return int(up), int(math.prod(op.output_shape()) * size)


def transfer_bytes(op: OpSpec, inputs: Mapping[str, np.ndarray] | None) -> tuple[int, int]:
    """(up, down) bytes a workload moves over a link: its inline tensors' bytes (or the op's
    inputs at its dtype when it has none: what a client would have to ship), and the op's
    output at its dtype."""
    up, down = op_io_bytes(op)
    if inputs is not None:
        up = int(sum(int(a.nbytes) for a in inputs.values()))
    return up, down


# --- learning ---------------------------------------------------------------------------------
_STATS = ("w", "sx", "sy", "sxx", "sxy", "syy")


def update_transfer(stored: Mapping[str, Any] | None,
                    rows: Iterable[tuple[float, float]],
                    weigh: Callable[[float], float] | None = None) -> dict[str, Any]:
    """``stored`` (a class's forgetting sums, or None) updated with measured
    ``(bytes, transfer ms)`` rows, in order; rows that are not finite and >= 0 are skipped.
    ``weigh``: each row's weight from its size in MB (1: every row alike), its inverse the
    row's noise variance relative to ``NOISE_MS``'s. JSON-ready: ``{"n", "w", "sx", "sy",
    "sxx", "sxy", "syy", "last_ms"}`` (x in MB)."""
    out = {k: float((stored or {}).get(k, 0.0)) for k in _STATS}
    n = int((stored or {}).get("n", 0))
    last = (stored or {}).get("last_ms")
    for nbytes, ms in rows:
        x, y = float(nbytes) / MB, float(ms)
        if not (math.isfinite(x) and math.isfinite(y) and x >= 0 and y >= 0):
            continue
        for k in _STATS:
            out[k] *= FORGETTING
        wt = 1.0 if weigh is None else weigh(x)
        out["w"] += wt
        out["sx"] += wt * x
        out["sy"] += wt * y
        out["sxx"] += wt * x * x
        out["sxy"] += wt * x * y
        out["syy"] += wt * y * y
        n += 1
        last = y
    return {**out, "n": n, "last_ms": last}


def transfer_rows(metrics: Iterable[Any]) -> dict[str, list[tuple[float, float]]]:
    """Per class, the ``(transfer_bytes, transfer_ms)`` of the successful executions among
    metric rows (objects with the metric record's fields) that measured a transfer."""
    out: dict[str, list[tuple[float, float]]] = {}
    for metric in metrics:
        ms, nbytes = getattr(metric, "transfer_ms", None), getattr(metric, "transfer_bytes", None)
        if getattr(metric, "status", None) != "ok" or not isinstance(ms, int | float) \
                or isinstance(nbytes, bool) or not isinstance(nbytes, int | float):
            continue
        out.setdefault(str(metric.device_class), []).append((float(nbytes), float(ms)))
    return out


@dataclass(frozen=True)
class TransferEstimate:
    """The fitted line: ``ms = a + b · MB``, and how many rows it has seen."""

    a_ms: float
    b_ms_per_mb: float
    rows: int
    declared: bool

    def ms(self, nbytes: float) -> float:
        return max(0.0, self.a_ms + self.b_ms_per_mb * float(nbytes) / MB)


def fit_transfer(link: Link | None, stored: Mapping[str, Any] | None) -> TransferEstimate | None:
    """The posterior mean of (a, b) from the declared ``link`` (prior) and the class's
    measured sums; None when the class neither declared a link nor measured a transfer (a
    local class: nothing to move).

    The 2x2 normal equations solved in plain floats (Cramer's rule; the prior makes them
    positive definite): the worker fits every class's handling line this way after each
    outcome it completes (models/handling.py), where NumPy's small-array calls cost 43 µs a
    fit on the AMD EPYC of 2026-12-07 and these 4."""
    rows = int((stored or {}).get("n", 0))
    if link is None and rows == 0:
        return None
    if link is not None:
        mean_a, mean_b = link.rtt_ms, link.ms_per_mb()
        std_a = PRIOR_REL_STD * link.rtt_ms + 1.0
        std_b = PRIOR_REL_STD * link.ms_per_mb() + 1e-3
    else:
        (mean_a, mean_b), (std_a, std_b) = (0.0, 0.0), VAGUE_STD
    # Precision [[paa, pab], [pab, pbb]] and right-hand side (ra, rb).
    paa, pbb, pab = 1.0 / std_a**2, 1.0 / std_b**2, 0.0
    ra, rb = paa * mean_a, pbb * mean_b
    if rows and stored:
        noise = NOISE_MS**2
        paa += float(stored["w"]) / noise
        pab += float(stored["sx"]) / noise
        pbb += float(stored["sxx"]) / noise
        ra += float(stored["sy"]) / noise
        rb += float(stored["sxy"]) / noise
    det = paa * pbb - pab * pab
    a = (ra * pbb - pab * rb) / det
    b = (paa * rb - pab * ra) / det
    return TransferEstimate(float(a), float(max(b, 0.0)), rows, link is not None)


def predict_transfer_ms(link: Link | None, stored: Mapping[str, Any] | None,
                        nbytes: float) -> float:
    """Expected transfer ms of ``nbytes`` to a class (0 for a local class)."""
    fit = fit_transfer(link, stored)
    return 0.0 if fit is None else fit.ms(nbytes)


def device_cost(price_per_hour: float | None, held_ms: float) -> float:
    """What holding a device of ``price_per_hour`` for ``held_ms`` costs (0 when unpriced:
    a device without a declared price is free as far as the router knows)."""
    return 0.0 if not price_per_hour else float(price_per_hour) * max(0.0, held_ms) / HOUR_MS
