"""What an executor spends on a workload around its measured execution, per class.

An executor holds a workload from taking it off its queue to its outcome: it makes the inputs
(from the seed, or decodes inline tensors), sets up a cold shape, executes, and checksums or
encodes the output (``agents.complete.service_ms``). The cost models learn the execution
alone (``exec_ms``, what the runtime did); the rest is *handling*. On the live CPU executors
it is about 1.5 ms per MB moved: a 4096 x 2048 softmax takes 76 ms to make its input and
20-35 ms to checksum its output, around an execution of 10-25 ms. A router that compared
executions alone took a 2 ms prediction for a 110 ms workload, and its queues for several
times shorter than they were (the class's pace, measured ÷ charged, was held at its bound).

Learned per class and precision (`handling_key`: a bf16 workload's inputs are converted to
bf16 and its output back, ~1.5 ms for a BERT-base QKV projection on torch, where its fp32 run
converts nothing; learned per class alone, torch's line on the model layers benchmark carried
1.7 ms of handling to every fp32 op against NumPy's 0.8, more than most of those ops'
executions) by each worker from the outcomes it completes (agents/complete.py), as a
line in the workload's input and output bytes with exponential forgetting: the fit of a link's
transfer time (models/transfer.py), here with a vague prior and each row weighed by its size
(`row_weight`). Charged to a candidate beside its execution, setup and transfer, and to the
class's backlog with the route. A class with
nothing measured yet takes the least estimate of the classes that have (making inputs and
checksums is mostly the same work on every runtime); 0 before any. Derived state, in memory:
a restarted worker learns it again from its next few dozen outcomes.

Once a class has ``CAP_AFTER_ROWS`` rows, a row is taken as at most ``CAP_FACTOR`` times the
current estimate plus ``CAP_FLOOR_MS``: an executor descheduled for a moment on a busy machine
measures tens of milliseconds of "handling" for a workload that takes a fraction of one, and
the line's slope is set by its few large workloads, so one such row at 3 MB made a simulated
H100's handling of that size 13x what it was (0.36 ms → 4.6 ms), above the whole completion of
a slower class; the router then sent that size elsewhere, and with no more rows of it the
estimate never came back. A real change still gets through, a few rows at a time (each row's
cap is four times the estimate it moved).

Before a class has those rows its estimate is unsure, and errs low: it is charged at most the
least estimate of the other classes measured, and when its ``CAP_AFTER_ROWS``-th row comes its
line is fitted again from its rows, each capped against that fit (a few rounds), so that one
stalled row among its first does not stay in it. An estimate that errs high draws no more rows
and never comes back: in CI (2026-12-07, a loaded 2-core machine) a simulated H100's first
rows read 142 ms of handling beside a simulated CPU core's 0.75 ms, and the router sent the
H100 nothing more. One that errs low draws work, whose rows correct it within ``CAP_AFTER_ROWS``
workloads.

A line does not fit every size: bf16 conversions of tensors out of the cache cost more per MB
than those in it (torch bf16 on the live bf16 set, AMD EPYC 2026-12-07: 68 ms of handling
for a 4096 x 2048 softmax where the line, set by the smaller rows, read 36; its fp32 run
handled the same workload in 37, so the router took bf16's faster execution for a saving it
did not have). So a key also keeps its latest ``SIZE_ROWS`` rows of each size (sizes within
``SIZE_BIN`` in ln-bytes share one), and once a size has two the estimate there is the least
of them: a stall only raises a row, and one row alone is not trusted (that size is estimated
from the line until a second row comes). And a class with few rows is charged the least of
the estimates of the keys that have measured a workload at least half as large (any key
where none has): a line extrapolated from small rows alone read 3 ms for that softmax, and
made every try of it on another runtime look cheap (JAX's bf16 handling of it: ~70 ms).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from models.transfer import TransferEstimate, fit_transfer, update_transfer

CAP_AFTER_ROWS = 10  # rows before a class's estimate caps what one row may count
CAP_FACTOR = 4.0  # a row counts as at most this many times the current estimate ...
CAP_FLOOR_MS = 2.0  # ... plus this (a row near 0 ms still moves it)
SPREAD_MB = 1.0  # a row's noise grows with its size beyond this (`row_weight`)
SIZE_BIN = 0.1  # sizes within this in ln-bytes (~10 %) are one size to `Handling`'s memory
SIZE_ROWS = 3  # the latest rows of each size kept; two are needed for an estimate
SIZES_KEPT = 512  # sizes remembered per key (the oldest forgotten beyond)


def row_weight(mb: float) -> float:
    """A row's weight in the line's fit by its size: its noise taken as growing in proportion
    to its size beyond ``SPREAD_MB`` (a 64 MB row's handling moves by tens of ms, a 10 KB
    row's by a fraction of one), so that the intercept is set by the small rows and the slope
    by the large ones. Weighed alike, the few large rows set both, and a line through them
    read 0 ms (its intercept negative, clamped) at sizes where torch's handling was ~2."""
    return 1.0 / (1.0 + mb / SPREAD_MB) ** 2


def handling_key(device_class: str, precision: str) -> str:
    """The key a class's handling is learned under for a precision: the class for fp32,
    ``<class>/<precision>`` for the others."""
    return device_class if precision == "fp32" else f"{device_class}/{precision}"


def handling_ms(service_ms: float, exec_ms: float, compile_ms: float | None,
                transfer_ms: float | None) -> float | None:
    """A workload's handling: what its executor held it for (``service_ms``, its share of a
    batched call) beyond its share of the execution, compilation and transfer; None when
    that is not a measurement (not finite, or the clocks disagree: below zero)."""
    ms = service_ms - exec_ms - float(compile_ms or 0.0) - float(transfer_ms or 0.0)
    return ms if math.isfinite(ms) and ms >= 0.0 else None


class Handling:
    """Per `handling_key` (class and precision), the learned line ``handling ms = a + b · MB``
    (see the module)."""

    def __init__(self) -> None:
        self._sums: dict[str, dict[str, Any]] = {}
        self._fits: dict[str, TransferEstimate | None] = {}
        self._first: dict[str, list[tuple[float, float]]] = {}  # a key's rows, until it
        # has CAP_AFTER_ROWS of them
        self._sizes: dict[str, dict[int, deque[float]]] = {}  # a key's latest rows per size
        self._largest: dict[str, float] = {}  # the largest workload a key has measured

    def observe(self, key: str, nbytes: float, ms: float) -> None:
        """One finished workload of the class in a precision (``key``: `handling_key`):
        ``nbytes`` in and out, ``ms`` of handling (capped: see the module)."""
        first = self._first.get(key)
        if first is None and key not in self._sums:
            first = self._first[key] = []
        if first is not None:
            first.append((nbytes, ms))
            if len(first) >= CAP_AFTER_ROWS:
                del self._first[key]
                first = capped_rows(first)
            self._sums[key] = update_transfer(None, first, row_weight)
        else:
            if ms > CAP_FLOOR_MS:  # a row under the floor is never capped
                fit = self._fit(key)
                if fit is not None:
                    ms = min(ms, CAP_FACTOR * fit.ms(nbytes) + CAP_FLOOR_MS)
            self._sums[key] = update_transfer(self._sums[key], [(nbytes, ms)], row_weight)
        self._fits.pop(key, None)
        sizes = self._sizes.setdefault(key, {})
        size = size_bin(nbytes)
        rows = sizes.get(size)
        if rows is None:
            if len(sizes) >= SIZES_KEPT:
                del sizes[next(iter(sizes))]
            rows = sizes[size] = deque(maxlen=SIZE_ROWS)
        rows.append(ms)
        self._largest[key] = max(self._largest.get(key, 0.0), float(nbytes))

    def _sized(self, key: str, nbytes: float) -> float | None:
        """The least of the key's latest rows of this size, from two rows; else None."""
        rows = self._sizes.get(key, {}).get(size_bin(nbytes))
        return min(rows) if rows is not None and len(rows) >= 2 else None

    def _estimate(self, key: str, nbytes: float) -> float | None:
        sized = self._sized(key, nbytes)
        if sized is not None:
            return sized
        fit = self._fit(key)
        return fit.ms(nbytes) if fit is not None else None

    def _fit(self, key: str) -> TransferEstimate | None:
        if key not in self._fits:
            stored = self._sums.get(key)
            self._fits[key] = (fit_transfer(None, stored)
                               if stored and stored.get("n") else None)
        return self._fits[key]

    def ms(self, key: str, nbytes: float) -> float:
        """The expected handling of a workload of ``nbytes`` on the class in a precision
        (``key``: `handling_key`)."""
        if key not in self._first:
            own = self._estimate(key, nbytes)
            if own is not None:
                return own
        near = [c for c in self._sums if self._largest.get(c, 0.0) >= 0.5 * nbytes]
        measured = [ms for c in (near or self._sums)
                    if (ms := self._estimate(c, nbytes)) is not None]
        return min(measured, default=0.0)  # its own among them while it has few rows

    def by_class(self) -> dict[str, dict[str, float]]:
        """``{key: {"a_ms", "ms_per_mb", "rows"}}`` (`handling_key`: the class, or
        ``<class>/<precision>`` beside fp32) for the dashboard and logs."""
        out = {}
        for c in sorted(self._sums):
            fit = self._fit(c)
            if fit is not None:
                out[c] = {"a_ms": fit.a_ms, "ms_per_mb": fit.b_ms_per_mb,
                          "rows": float(fit.rows)}
        return out


def size_bin(nbytes: float) -> int:
    """The size a workload of ``nbytes`` counts as in `Handling`'s memory of sizes."""
    return round(math.log(max(float(nbytes), 1.0)) / SIZE_BIN)


def capped_rows(rows: list[tuple[float, float]], rounds: int = 5) -> list[tuple[float, float]]:
    """``(bytes, ms)`` rows, each capped at ``CAP_FACTOR`` times the line fitted to them
    plus ``CAP_FLOOR_MS``, the line fitted again to the capped rows, ``rounds`` times at
    most: a class's first rows, of which one may be an executor's stall."""
    out = list(rows)
    for _ in range(rounds):
        fit = fit_transfer(None, update_transfer(None, out, row_weight))
        if fit is None:
            return out
        capped = [(b, min(ms, CAP_FACTOR * fit.ms(b) + CAP_FLOOR_MS)) for b, ms in out]
        if capped == out:
            break
        out = capped
    return out
