"""Routing vocabulary shared by every policy: candidates, decisions, the policy protocol.

A *candidate* is one (device class, variant) the workload could run as, with the class's live
instance count and backlog (routed, unfinished work in predicted ms). A *decision* is what the
decide agent turns into a ``switchyard.routes.<class>`` record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from models.costmodel import CostModel, CostModelLike, Prediction
from models.history import HistoryModel
from models.ops import OpSpec, Variant
from models.priors import prior_for_class
from models.workload import Workload

T = TypeVar("T")

__all__ = [
    "Candidate",
    "Decision",
    "OverBudget",
    "Policy",
    "PriorModels",
    "Reason",
    "best_index_plain",
    "class_representatives",
    "divide_plain",
    "eligible_candidates",
    "lowest_plain",
    "objective_weights",
    "remembered",
    "score_order_key",
    "weighted_scores",
    "weighted_scores_plain",
]

Reason = Literal["explore", "exploit", "fallback"]


# Candidate and Decision are built for every workload (a few candidates, one decision) and
# never changed after: plain dataclasses, because a frozen one's __init__ sets each field
# through object.__setattr__ (4 µs for 14 fields against 1 µs; ~7 % of the decide stage).
@dataclass
class Candidate:
    """One way to run a workload: a device class, a variant, and the class's queue."""

    device_class: str
    variant: Variant
    live_instances: int = 1
    backlog_ms: float = 0.0
    # Expected one-time setup (build/compile + warm-up) when the class has probably not run
    # this (shape, variant) yet; 0 when it has (models/setup.py).
    setup_ms: float = 0.0
    # Predicted executions to add to ``setup_ms`` (1 when it is the first run's excess over
    # one execution: the warm-up run is one more; models/setup.py).
    setup_runs: float = 0.0
    # The share of that setup the policy weighs (the rest is spread over the shape's expected
    # repeats, models/setup.py::setup_share); the backlog is charged all of it.
    setup_share: float = 1.0
    # The class has probably not run this (shape, variant) yet and has never measured what
    # setting it up costs: trying it is exploration (models/policy.py: only on an idle class).
    cold: bool = False
    # The wait at the device the route would go to (the class's least-loaded one,
    # models/dispatch.py), when the class's devices reported their route partitions.
    device_wait_ms: float | None = None
    # Expected time to move the workload's bytes over the class's link (models/transfer.py;
    # 0 for a local class), and the class's declared price per device-hour (0: unpriced).
    transfer_ms: float = 0.0
    price_per_hour: float = 0.0
    # What the class's executor is expected to spend on the workload around the execution:
    # making its inputs, checksumming its output (models/handling.py; 0: not known).
    handling_ms: float = 0.0
    # Other classes' queued work on the cores this class shares with them
    # (models/dispatch.py::colocated; 0 where it shares none): its core is idle only when
    # this is 0 too.
    core_busy_ms: float = 0.0
    # Per neighbour on those cores still holding work once this class's own queue drained:
    # (that work, ms; how many workloads) (models/dispatch.py::core_left): what a workload
    # sent here runs beside, and delays (``shared_core_ms``). Empty where it shares no core.
    core_left: tuple[tuple[float, float], ...] = ()
    # Whether the class's executors share a core with another class's (its tries take turns
    # from their work: models/policy.py::SwitchyardPolicy._within_budget).
    shares_core: bool = False
    # The class's measured matmul rates, (precision, GFLOP/s) (``ClassView.calibration``):
    # a class with no learned model yet is predicted by a prior built from them.
    calibration: tuple[tuple[str, float], ...] = ()

    @property
    def expected_wait_ms(self) -> float:
        """The class's backlog shared over its live instances."""
        return max(self.backlog_ms, 0.0) / max(self.live_instances, 1)

    @property
    def start_wait_ms(self) -> float:
        """How long the workload would wait to start: at the device it would be sent to when
        that is known, else the class's average (``expected_wait_ms``). The earliest-finish
        policies (switchyard, dmda, the oracle) add it to the execution time; the queue
        heuristics (JSQ, pow2) compare ``expected_wait_ms``, as their users know them."""
        return self.expected_wait_ms if self.device_wait_ms is None else max(
            self.device_wait_ms, 0.0)


@dataclass
class Decision:
    """One routing decision. ``energy_fallback`` marks an energy-weighted request decided on
    latency because some candidate class had no energy measurements."""

    device_class: str
    variant: Variant
    predicted_ms: float
    predicted_std_ms: float
    predicted_energy_j: float | None
    reason: Reason
    meets_deadline: bool
    model_version: int
    expected_wait_ms: float
    score: float
    energy_fallback: bool = False
    setup_ms: float = 0.0  # the expected setup charged to the chosen candidate
    transfer_ms: float = 0.0  # the expected transfer over the chosen class's link
    handling_ms: float = 0.0  # the expected handling around the execution (models/handling.py)
    cost: float = 0.0  # price x expected device time (setup, transfer and execution)
    # The chosen class's energy is its roofline prior's estimate (no model learned yet).
    energy_estimated: bool = False
    # Why it won: the chosen candidate's terms first, then the best others' (at most 3), each
    # {device_class, precision, mode, exec_ms, transfer_ms, wait_ms, setup_ms, handling_ms,
    # energy_j, cost, score}; empty for policies that do not score candidates.
    compared: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the variant as ``{"precision", "mode"}``)."""
        out = asdict(self)
        out["variant"] = self.variant.to_dict()
        return out


class OverBudget(ValueError):
    """No candidate is predicted to stay within the request's ``max_cost``."""


class Policy(Protocol):
    """What the decide agent calls. Deterministic given ``rng``; never mutates its inputs;
    always returns one of ``candidates`` (ValueError when none is usable)."""

    name: str

    def decide(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        models: Mapping[str, CostModelLike],
        history: HistoryModel | None,
        rng: np.random.Generator,
    ) -> Decision:
        """One decision for ``workload`` among ``candidates``."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: name, options and state (see `models.policy.policy_from_dict`)."""


def remembered(memo: dict[Any, Any] | None, key: Any, compute: Callable[[], T]) -> T:
    """``memo[key]``, computed by ``compute()`` the first time it is asked for; without a
    memo, ``compute()`` every time (a snapshot's memo, models/routing.py::Snapshot)."""
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def eligible_candidates(workload: Workload, candidates: Sequence[Candidate]) -> list[Candidate]:
    """Candidates at a precision the workload allows, on classes with a live instance.

    Raises ValueError when none is left: the caller offered nothing the request can use.
    """
    allowed = set(workload.precisions)
    usable = [c for c in candidates if c.variant.precision in allowed and c.live_instances > 0]
    if not usable:
        raise ValueError(
            f"no usable candidate for {workload.id}: {len(candidates)} offered, "
            f"precisions {sorted(allowed)}"
        )
    return usable


def class_representatives(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per class, sorted by class name: its fp32 eager variant when offered,
    else the first offered (what a class-level baseline runs)."""
    chosen: dict[str, Candidate] = {}
    for c in candidates:
        current = chosen.get(c.device_class)
        if current is None or (
            c.variant == Variant("fp32", "eager") and current.variant != c.variant
        ):
            chosen[c.device_class] = c
    return [chosen[k] for k in sorted(chosen)]


class PriorModels:
    """Roofline-prior models for classes that have no learned model yet (cold start).

    Cached per class; a prior model never learns here, so the cache is not state.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[str, tuple[tuple[str, float], ...]], CostModel] = {}

    def get(
        self, models: Mapping[str, CostModelLike], device_class: str,
        calibration: tuple[tuple[str, float], ...] = (),
    ) -> tuple[CostModelLike, bool]:
        """(model, learned): the class's model, or its prior model (from the class's measured
        ``calibration`` where it has one, models/priors.py) and False."""
        model = models.get(device_class)
        if model is not None:
            return model, True
        key = (device_class, calibration)
        prior = self._cache.get(key)
        if prior is None:
            prior = self._cache[key] = CostModel(
                device_class, prior_for_class(device_class, dict(calibration)))
        return prior, False

    def prior_log_ms(self, c: Candidate, op: OpSpec) -> float:
        """The class's prior prediction of ``op`` at the candidate's variant, ln ms."""
        return self.get({}, c.device_class, c.calibration)[0].predict_one(op, c.variant).log_mean

    def predict(
        self, models: Mapping[str, CostModelLike], c: Candidate, workload: Workload
    ) -> tuple[Prediction, int]:
        """(prediction, model version) for a candidate; version 0 for a prior."""
        model, learned = self.get(models, c.device_class, c.calibration)
        return model.predict_one(workload.op, c.variant), model.version if learned else 0


def objective_weights(objective: Mapping[str, float], latency: T, energy: T | None,
                      cost: T | None) -> tuple[float, float, float, T | None]:
    """The latency, energy and cost weights of ``objective`` (a term given as None weighs 0),
    and the term that decides alone when no other weighs anything (None for a mix): what
    `weighted_scores` and `weighted_scores_plain` share."""
    w_energy = float(objective.get("energy", 0.0)) if energy is not None else 0.0
    w_cost = float(objective.get("cost", 0.0)) if cost is not None else 0.0
    w_latency = float(objective.get("latency", 1.0 - w_energy - w_cost))
    alone: T | None = None
    if w_energy <= 0.0 and w_cost <= 0.0:
        alone = latency
    elif w_latency <= 0.0 and w_cost <= 0.0 and energy is not None:
        alone = energy
    elif w_latency <= 0.0 and w_energy <= 0.0 and cost is not None:
        alone = cost
    return w_latency, w_energy, w_cost, alone


def weighted_scores(
    latency_ms: np.ndarray, energy_j: np.ndarray | None, objective: Mapping[str, float],
    cost: np.ndarray | None = None,
) -> np.ndarray:
    """Lower is better. Pure latency: completion ms; pure energy: joules; pure cost: cost; a
    mix: each term divided by its best value among the candidates (so 1.0 is "as good as the
    best"; for cost, the cheapest priced one, so a free candidate scores 0) and weighted.
    ``energy_j``/``cost`` None means that term is left out. Ties (free candidates under a
    pure cost objective) are broken by `best_index`."""
    w_latency, w_energy, w_cost, alone = objective_weights(objective, latency_ms, energy_j, cost)
    if alone is not None:
        return alone
    total = w_latency + w_energy + w_cost
    best_latency = max(float(latency_ms.min()), 1e-12)
    score = w_latency * latency_ms / best_latency
    if energy_j is not None and w_energy > 0.0:
        score = score + w_energy * energy_j / max(float(energy_j.min()), 1e-12)
    if cost is not None and w_cost > 0.0:
        priced = cost[cost > 0.0]
        if priced.size:
            score = score + w_cost * cost / float(priced.min())
    return score / total


def best_index(scores: np.ndarray, latency_ms: np.ndarray) -> int:
    """The index of the lowest score, ties broken by the lower latency."""
    return int(np.lexsort((latency_ms, scores))[0])


# The same on plain floats: the switchyard policy weighs a handful of candidates per decision,
# where each NumPy operation cost more than the arithmetic; the operations and their order are
# NumPy's, so the results are the same to the bit (tests/models/test_policy.py).
def divide_plain(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` as NumPy divides floats: ±inf or nan for a zero
    denominator, not ZeroDivisionError."""
    if denominator:
        return numerator / denominator
    if numerator != numerator or numerator == 0.0:
        return math.nan
    return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)


def score_order_key(score: float, latency: float) -> tuple[bool, float, bool, float]:
    """Lowest score first, ties by the lower latency, nan after every number (as
    ``np.lexsort((latency, scores))`` orders them; Python's sort is stable like it)."""
    return (score != score, score if score == score else 0.0,
            latency != latency, latency if latency == latency else 0.0)


def best_index_plain(scores: Sequence[float], latency_ms: Sequence[float]) -> int:
    """`best_index` on plain floats: the index of the lowest score,
    ties broken by the lower latency, then by the lower index."""
    if any(v != v for v in scores) or any(v != v for v in latency_ms):
        # a nan: the general order (nan last)
        return min(range(len(scores)), key=lambda j: score_order_key(scores[j], latency_ms[j]))
    best, best_score, best_latency = 0, scores[0], latency_ms[0]
    for i in range(1, len(scores)):
        score, latency = scores[i], latency_ms[i]
        if score < best_score or (score == best_score and latency < best_latency):
            best, best_score, best_latency = i, score, latency
    return best


def lowest_plain(values: Sequence[float]) -> int:
    """``np.argmin`` on plain floats: the first lowest, or the first nan."""
    for i, value in enumerate(values):
        if value != value:
            return i
    return min(range(len(values)), key=values.__getitem__)


def weighted_scores_plain(latency_ms: list[float], energy_j: list[float] | None,
                          objective: Mapping[str, float],
                          cost: list[float] | None = None) -> list[float]:
    """`weighted_scores` on plain floats, operation for operation."""
    w_latency, w_energy, w_cost, alone = objective_weights(objective, latency_ms, energy_j, cost)
    if alone is not None:
        return alone
    total = w_latency + w_energy + w_cost
    best_latency = max(_nanmin(latency_ms), 1e-12)
    score = [w_latency * v / best_latency for v in latency_ms]
    if energy_j is not None and w_energy > 0.0:
        best_energy = max(_nanmin(energy_j), 1e-12)
        score = [s + w_energy * e / best_energy for s, e in zip(score, energy_j, strict=True)]
    if cost is not None and w_cost > 0.0:
        priced = [v for v in cost if v > 0.0]
        if priced:
            cheapest = min(priced)
            score = [s + w_cost * v / cheapest for s, v in zip(score, cost, strict=True)]
    return [s / total for s in score]


def _nanmin(values: Sequence[float]) -> float:
    """``ndarray.min()``: nan when any value is nan."""
    return math.nan if any(v != v for v in values) else min(values)


def meets(deadline_ms: float | None, completion_ms: float) -> bool:
    """Whether a predicted completion (wait + exec) is within the deadline (None: always)."""
    return deadline_ms is None or (math.isfinite(completion_ms) and completion_ms <= deadline_ms)
