"""The one-time setup cost of a (shape, variant) an executor has not run yet.

An executor builds (for compiled modes: compiles) a function the first time it meets a shape in
a variant and runs it once untimed to warm it up; executions after that are what ``exec_ms``
measures and what the cost models learn. The first run's extra time is real busy time of the
device, reported as ``setup_ms`` in the metric: a JAX ``compiled`` variant costs 100–200 ms of
compilation per new shape on this machine against executions of a millisecond, and even eager
modes pay lazy initialisation. A router blind to it explores cold variants that look cheap and
queues work behind compilations.

The first run of an eager shape is one more execution (the untimed warm-up) plus lazy
initialisation, so its setup grows with the op: on this machine's torch, 3 ms for a 64³ matmul,
4.5 for 512³, 70 for 1024³ — and a mean over a kind's shapes charged a small shape its large
shapes' warm-ups (36 ms on every cold small shape in the live sets, so torch never ran them).
A compiled variant's compilation hardly grows with the shape. Learned, then, per (op kind,
mode) with a per-mode fallback, as an exponentially weighted mean of the first run's *excess*
over one execution (``setup_ms - exec_ms``, at least 0: lazy initialisation, compilation);
the expected setup of a new shape is that excess plus one predicted execution
(`Candidate.setup_runs`, added by the policy). Entries stored before (``ms`` without
``excess_ms``) are read as they were: a whole setup.
Before any workload measured a mode on a class, its executors' start-up measurement of the
same excess on the reference ops (heartbeats' ``setup_excess_ms``, runtimes/calibrate.py::
calibrate_setup; models/routing.py) is charged instead: eager JAX's first call of a shape cost
264-666 ms on the live mix's layers while nothing was charged, and a one-queue fleet's first
workloads queued behind them. ``update_setup`` learns them; ``WarmRoutes`` remembers which (shape, variant) a decider has
already sent to each class (bounded, least recently used first out, like the executors' own
caches). The policy charges the expected setup to candidates that are probably cold. With
several executors in a class the first route warms only one of them: the estimate is optimistic
there, never a penalty on a warm path.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

ALPHA = 0.3  # weight of a new setup measurement in the running mean
WARM_ROUTES = 512  # (shape, variant) pairs remembered per class, as runtimes/base.py keeps warm


def setup_excess(setup_ms: float, exec_ms: float) -> float:
    """A first run's setup beyond one execution (building, compiling, lazy initialisation),
    ``setup_ms - exec_ms``, at least 0: what ``update_setup`` learns from workloads and what
    executors measure on the reference ops at start (runtimes/calibrate.py)."""
    return max(0.0, float(setup_ms) - float(exec_ms))


def update_setup(stored: Mapping[str, Any] | None,
                 rows: Iterable[tuple[str, str, float, float]]) -> dict[str, Any]:
    """``stored`` (the class's running means, or None) updated with ``(kind, mode, setup_ms,
    exec_ms)`` measurements; JSON-ready: per key ``{"ms": mean setup, "excess_ms": mean
    excess over the execution, "n"}``."""
    out: dict[str, Any] = {k: dict(v) for k, v in (stored or {}).items()}
    for kind, mode, ms, exec_ms in rows:
        if not ms >= 0.0:
            continue
        excess = setup_excess(ms, exec_ms) if exec_ms >= 0.0 else float(ms)
        for key in (f"{kind}/{mode}", mode):
            entry = out.get(key)
            if entry is None or "excess_ms" not in entry:  # new, or stored before the excess
                out[key] = {"ms": float(ms), "excess_ms": excess, "n": 1}
            else:
                entry["ms"] = (1.0 - ALPHA) * float(entry["ms"]) + ALPHA * float(ms)
                entry["excess_ms"] = ((1.0 - ALPHA) * float(entry["excess_ms"])
                                      + ALPHA * excess)
                entry["n"] = int(entry["n"]) + 1
    return out


def expected_setup(stored: Mapping[str, Any] | None, kind: str, mode: str) -> tuple[float, float]:
    """The class's expected setup of a new (kind, mode) shape: (ms, executions) — the first
    run's excess and how many predicted executions to add to it (1: the warm-up run; 0 for an
    entry stored before the excess was, whose ms is the whole setup); (0, 0) when never
    measured."""
    if not stored:
        return 0.0, 0.0
    entry = stored.get(f"{kind}/{mode}") or stored.get(mode)
    if not entry:
        return 0.0, 0.0
    if "excess_ms" in entry:
        return float(entry["excess_ms"]), 1.0
    return float(entry["ms"]), 0.0


def setup_known(stored: Mapping[str, Any] | None, kind: str, mode: str) -> bool:
    """Whether the class has measured the setup of a new (kind, mode) shape (or of the mode)."""
    if not stored:
        return False
    return bool(stored.get(f"{kind}/{mode}") or stored.get(mode))


def setup_share(routed_before: int) -> float:
    """The share of a cold shape's setup that the policy weighs against its candidate when
    the decider has routed that shape ``routed_before`` times already (anywhere, any variant):
    1 / (1 + that count). The setup is paid once and the executions after it are warm: a shape
    that came n times is taken to come about n more (the count is all the decider knows of
    its future), and the setup is spread over them. Undivided, the first (class, variant) a
    repeated shape ran on kept it (the model layers benchmark, Intel Xeon 2026-12-07: torch
    bf16 charged 5.9 ms of setup against 2.9 ms saved on every one of the BERT FFN's six
    passes). The backlog is still charged the whole setup: the executor pays it once, now."""
    return 1.0 / (1.0 + max(0, int(routed_before)))


class WarmRoutes:
    """Per class, the (shape, variant) keys recently routed there (so probably warm); and per
    shape, how many times it was routed (`routed`; bounded the same way per shape)."""

    def __init__(self, capacity: int = WARM_ROUTES) -> None:
        self.capacity = int(capacity)
        self._by_class: dict[str, OrderedDict[tuple[str, str, str], None]] = {}
        self._routed: OrderedDict[str, int] = OrderedDict()

    def is_warm(self, device_class: str, key: tuple[str, str, str]) -> bool:
        return key in self._by_class.get(device_class, {})

    def routed(self, signature: str) -> int:
        """How many times a shape (an op's signature) was routed, to any class."""
        return self._routed.get(signature, 0)

    def mark(self, device_class: str, key: tuple[str, str, str]) -> None:
        seen = self._by_class.setdefault(device_class, OrderedDict())
        seen[key] = None
        seen.move_to_end(key)
        while len(seen) > self.capacity:
            seen.popitem(last=False)
        routed = self._routed
        routed[key[0]] = routed.get(key[0], 0) + 1
        routed.move_to_end(key[0])
        while len(routed) > 8 * self.capacity:
            routed.popitem(last=False)
