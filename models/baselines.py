"""Baseline routing policies, behind the same interface as switchyard's, for benchmarks.

Class-level baselines (round_robin, random, pow2, jsq, static) choose a device class and run
its fp32 eager variant when offered (else the first offered). ``dmda`` and ``oracle`` rank
every (class, variant) by earliest expected finish. All of them still fill the decision's
predicted time from the cost models (or the roofline prior), because the backlog the next
decision sees is the sum of predicted times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from models.costmodel import CostModelLike
from models.decision import (
    Candidate,
    Decision,
    PriorModels,
    Reason,
    class_representatives,
    eligible_candidates,
    meets,
    weighted_scores,
)
from models.history import CALIBRATE_MINIMUM, HistoryModel
from models.ops import OpSpec, Variant
from models.workload import Workload

__all__ = [
    "DmdaPolicy",
    "JsqPolicy",
    "OraclePolicy",
    "Pow2Policy",
    "RandomPolicy",
    "RoundRobinPolicy",
    "StaticPolicy",
    "TrueCost",
]

# true_ms(device_class, op, variant) -> ms: the real cost (pre-profile or simulator model).
TrueCost = Callable[[str, OpSpec, Variant], float]


class _Baseline:
    """Shared plumbing: the decision record for a chosen candidate."""

    name = "baseline"

    def __init__(self) -> None:
        self._priors = PriorModels()

    def _decision(
        self,
        workload: Workload,
        chosen: Candidate,
        models: Mapping[str, CostModelLike],
        reason: Reason,
        score: float,
        predicted_ms: float | None = None,
    ) -> Decision:
        pred, version = self._priors.predict(models, chosen, workload)
        ms = pred.mean_ms if predicted_ms is None else predicted_ms
        wait = chosen.expected_wait_ms
        return Decision(
            device_class=chosen.device_class,
            variant=chosen.variant,
            predicted_ms=ms,
            predicted_std_ms=pred.std_ms if predicted_ms is None else 0.0,
            predicted_energy_j=pred.energy_j,
            reason=reason,
            meets_deadline=meets(workload.deadline_ms, wait + ms),
            model_version=version,
            expected_wait_ms=wait,
            score=float(score),
        )

    def options(self) -> dict[str, Any]:
        """Constructor options, JSON-ready."""
        return {}

    def state(self) -> dict[str, Any]:
        """Mutable state that must survive a restore (JSON-ready)."""
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `state` returned."""

    def to_dict(self) -> dict[str, Any]:
        """name, options and state; `models.policy.policy_from_dict` rebuilds it."""
        return {"name": self.name, "options": self.options(), "state": self.state()}


class _ClassPicker(_Baseline):
    """A baseline that picks one class among the candidates' per-class representatives."""

    reason: Reason = "exploit"

    def pick(self, reps: list[Candidate], rng: np.random.Generator) -> Candidate:
        """The chosen representative (``reps`` is non-empty)."""
        raise NotImplementedError

    def decide(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        models: Mapping[str, CostModelLike],
        history: HistoryModel | None,
        rng: np.random.Generator,
    ) -> Decision:
        """See the class docstring."""
        chosen = self.pick(class_representatives(eligible_candidates(workload, candidates)), rng)
        return self._decision(workload, chosen, models, self.reason, chosen.expected_wait_ms)


class RoundRobinPolicy(_ClassPicker):
    """Classes in turn (sorted by name), whatever their load."""

    name = "round_robin"

    def __init__(self) -> None:
        super().__init__()
        self.turn = 0

    def pick(self, reps: list[Candidate], rng: np.random.Generator) -> Candidate:
        """The next class in turn."""
        chosen = reps[self.turn % len(reps)]
        self.turn += 1
        return chosen

    def state(self) -> dict[str, Any]:
        """Mutable state that must survive a restore (JSON-ready)."""
        return {"turn": self.turn}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `state` returned."""
        self.turn = int(state.get("turn", 0))


class RandomPolicy(_ClassPicker):
    """A uniformly random class."""

    name = "random"
    reason: Reason = "explore"

    def pick(self, reps: list[Candidate], rng: np.random.Generator) -> Candidate:
        """A uniformly random class."""
        return reps[int(rng.integers(len(reps)))]


class Pow2Policy(_ClassPicker):
    """Power of two choices: two random classes, the one with the shorter expected wait."""

    name = "pow2"

    def pick(self, reps: list[Candidate], rng: np.random.Generator) -> Candidate:
        """The shorter wait of two random classes."""
        if len(reps) == 1:
            return reps[0]
        i, j = (int(v) for v in rng.choice(len(reps), size=2, replace=False))
        return reps[j] if reps[j].expected_wait_ms < reps[i].expected_wait_ms else reps[i]


class JsqPolicy(_ClassPicker):
    """Join the shortest queue: least backlog per live instance (random among ties)."""

    name = "jsq"

    def pick(self, reps: list[Candidate], rng: np.random.Generator) -> Candidate:
        """The shortest expected wait, random among ties."""
        waits = np.array([c.expected_wait_ms for c in reps])
        best = np.flatnonzero(waits == waits.min())
        return reps[int(best[rng.integers(best.size)])] if best.size > 1 else reps[int(best[0])]


class StaticPolicy(_Baseline):
    """Always one configured class (default: the first class by name); when it is not among
    the candidates, the shortest queue, marked ``fallback``."""

    name = "static"

    def __init__(self, device_class: str | None = None) -> None:
        super().__init__()
        self.device_class = device_class

    def options(self) -> dict[str, Any]:
        """Constructor options, JSON-ready."""
        return {"device_class": self.device_class}

    def decide(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        models: Mapping[str, CostModelLike],
        history: HistoryModel | None,
        rng: np.random.Generator,
    ) -> Decision:
        """See the class docstring."""
        reps = class_representatives(eligible_candidates(workload, candidates))
        target = self.device_class or reps[0].device_class
        for c in reps:
            if c.device_class == target:
                return self._decision(workload, c, models, "exploit", c.expected_wait_ms)
        chosen = min(reps, key=lambda c: c.expected_wait_ms)
        return self._decision(workload, chosen, models, "fallback", chosen.expected_wait_ms)


class DmdaPolicy(_Baseline):
    """StarPU's dmda: earliest expected finish = queue wait + history mean.

    As in StarPU, a (shape, class, variant) whose history is not yet calibrated is run first
    (the uncalibrated candidate with the shortest wait), so every option gets measured. With
    ``use_regression`` an uncalibrated shape with a fitted power law uses it instead
    (StarPU's non-linear regression model). Without any history: shortest wait, ``fallback``.
    """

    name = "dmda"

    def __init__(
        self, use_regression: bool = False, calibrate_minimum: int = CALIBRATE_MINIMUM
    ) -> None:
        super().__init__()
        self.use_regression = bool(use_regression)
        self.calibrate_minimum = int(calibrate_minimum)

    def options(self) -> dict[str, Any]:
        """Constructor options, JSON-ready."""
        return {"use_regression": self.use_regression, "calibrate_minimum": self.calibrate_minimum}

    def decide(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        models: Mapping[str, CostModelLike],
        history: HistoryModel | None,
        rng: np.random.Generator,
    ) -> Decision:
        """See the class docstring."""
        usable = eligible_candidates(workload, candidates)
        if history is None:
            chosen = min(usable, key=lambda c: c.expected_wait_ms)
            return self._decision(workload, chosen, models, "fallback", chosen.expected_wait_ms)
        op = workload.op
        expected: list[float | None] = []
        for c in usable:
            value = None
            if history.count(c.device_class, op, c.variant) >= self.calibrate_minimum:
                value = history.mean_ms(c.device_class, op, c.variant)
            elif self.use_regression:
                value = history.regression_ms(c.device_class, op, c.variant)
            expected.append(value)
        uncalibrated = [c for c, e in zip(usable, expected, strict=True) if e is None]
        if uncalibrated:
            chosen = min(uncalibrated, key=lambda c: c.expected_wait_ms)
            return self._decision(workload, chosen, models, "explore", chosen.expected_wait_ms)
        finish = [
            c.start_wait_ms + float(e)
            for c, e in zip(usable, expected, strict=True)
            if e is not None
        ]
        best = int(np.argmin(finish))
        chosen = usable[best]
        return self._decision(
            workload,
            chosen,
            models,
            "exploit",
            finish[best],
            predicted_ms=finish[best] - chosen.start_wait_ms,
        )


class OraclePolicy(_Baseline):
    """The same earliest-finish rule fed the true costs: ``true_ms(class, op, variant)`` (and
    optionally ``true_energy_j`` for energy-weighted requests). The bound to compare against."""

    name = "oracle"

    def __init__(
        self, true_ms: TrueCost | None = None, true_energy_j: TrueCost | None = None
    ) -> None:
        super().__init__()
        if true_ms is None:
            raise ValueError("the oracle policy needs true_ms(device_class, op, variant)")
        self.true_ms = true_ms
        self.true_energy_j = true_energy_j

    def decide(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        models: Mapping[str, CostModelLike],
        history: HistoryModel | None,
        rng: np.random.Generator,
    ) -> Decision:
        """See the class docstring."""
        usable = eligible_candidates(workload, candidates)
        op = workload.op
        exec_ms = np.array([self.true_ms(c.device_class, op, c.variant) for c in usable])
        finish = exec_ms + np.array([c.start_wait_ms for c in usable])
        energy = None
        if self.true_energy_j is not None:
            energy = np.array([self.true_energy_j(c.device_class, op, c.variant) for c in usable])
        feasible = [i for i, f in enumerate(finish) if meets(workload.deadline_ms, float(f))]
        pool = feasible or list(range(len(usable)))
        objective = workload.objective if feasible else {"latency": 1.0, "energy": 0.0}
        sub_energy = None if energy is None else energy[pool]
        scores = weighted_scores(finish[pool], sub_energy, objective)
        best = pool[int(np.argmin(scores))]
        decision = self._decision(
            workload,
            usable[best],
            models,
            "exploit",
            float(scores.min()),
            predicted_ms=float(exec_ms[best]),
        )
        if energy is None:
            return decision
        return Decision(**{**decision.__dict__, "predicted_energy_j": float(energy[best])})
