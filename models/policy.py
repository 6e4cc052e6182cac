"""Routing policies: switchyard's learned policy and the registry of baselines.

``switchyard`` scores each (class, variant) by expected completion = predicted execution time
+ expected wait (backlog / live instances) + the expected one-time setup when the class has
probably not run that (shape, variant) yet (models/setup.py) + the expected transfer over a
remote class's link (models/transfer.py) + the executor's expected handling around the
execution (models/handling.py) + on a core shared with other classes' executors, the turns it
gives them while it runs (models/dispatch.py::shared_core_ms); its score adds the turns it takes
from their queued workloads, so it is the mean completion of all of them that it keeps down. Or
by predicted joules, or by cost (the class's price per
device-hour x setup, transfer, handling and execution), or a normalised mix, as the request's
objective says; within its deadline where any candidate makes it, and never over its
``max_cost`` (none within: ``OverBudget``). It picks by Thompson sampling: each
candidate's expected time is drawn from its cost model's posterior, so a class the model is
unsure of (cold start, a new class, after drift) gets tried in proportion to its chance of
being best, and as the posterior firms up the draws agree with the means and the policy
exploits. Exploration pays for itself: an exploratory pick (one only the draw prefers, a
class still cold on its prior, a shape its class would first have to set up) is taken when
its class is idle — less queued than one execution of the greedy pick, and at least
``IDLE_WAIT_MS`` — or, once something is known, when no more work is queued ahead of it than
ahead of the greedy pick and it compiles nothing of unknown cost (an eager variant, or a
measured setup); otherwise the best known, ready candidate by the means is routed (at a cold
start, nothing known yet, the best candidate by the means): an unknown (say compiled, cold)
variant is tried while its class has nothing better to do, never behind a long queue that its
compilation would stall. On a core shared with other classes' executors, explorations also
spend a budget: what they add to the core's occupancy over the best known picks stays within
``EXPLORE_SHARE`` of the occupancy routed there, plus ``EXPLORE_ALLOWANCE_MS``, each charged
as expected when routed and as its executor measured it once its outcome comes (`settle`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.baselines import (
    DmdaPolicy,
    JsqPolicy,
    OraclePolicy,
    Pow2Policy,
    RandomPolicy,
    RoundRobinPolicy,
    StaticPolicy,
    TrueCost,
)
from models.costmodel import CostModel, CostModelLike, draw_log_sd
from models.decision import (
    Candidate,
    Decision,
    OverBudget,
    Policy,
    PriorModels,
    Reason,
    best_index_plain,
    divide_plain,
    eligible_candidates,
    lowest_plain,
    meets,
    remembered,
    score_order_key,
    weighted_scores_plain,
)
from models.dispatch import shared_core_ms
from models.history import HistoryModel
from models.ops import OpSpec
from models.transfer import HOUR_MS
from models.workload import Workload

__all__ = [
    "POLICY_NAMES",
    "Candidate",
    "Decision",
    "OverBudget",
    "Policy",
    "SwitchyardPolicy",
    "TrueCost",
    "make_policy",
    "policy_from_dict",
]

# Below this many learned rows a class's model is still mostly prior: label its picks
# "explore" even when the draw agrees with the mean (about 2 rows per op kind of a mixed load).
COLD_SAMPLES = 16
# A class with at most this much expected wait (or one greedy execution, if longer) is idle
# enough to try an exploratory pick on.
IDLE_WAIT_MS = 1.0
# On classes sharing a core, what explorations may add over the best known pick: this share of
# the occupancy routed to them, beyond an allowance (about one compilation) to start with.
EXPLORE_SHARE = 0.1
EXPLORE_ALLOWANCE_MS = 250.0
# Decisions on shared cores whose measured hold has not come back yet (`settle`), at most.
UNSETTLED_KEPT = 8192
# How many candidates besides the chosen one a decision lists in ``compared``.
COMPARED_OTHERS = 3


# Two candidates whose expected completions differ by less than this share are a tie: the draw
# picking either is not an exploration (the exact-shape corrections of models/local_residuals.py
# make a measured variant and an unmeasured one tie to a few parts in 10^5).
TIE = 0.01


@dataclass
class ModelTerms:
    """What `SwitchyardPolicy` reads of the cost models for one op over its usable candidates
    (in their order): the same for every workload of that op and those precisions while the
    models and classes are (a snapshot's memo keeps it, models/routing.py). Cold classes are
    already lifted by `SwitchyardPolicy._calibrate_cold` (``lift``: the factor, 1 elsewhere)."""

    mean_ms: list[float]
    std_ms: list[float]
    energy: list[float | None]
    estimated: list[bool]  # energy is the prior's estimate
    learned: list[bool]
    versions: list[int]
    samples: list[int]
    models: list[CostModelLike]
    # (ln-ms mean, posterior sd) where the model draws as a CostModel does; None: its sample_ms
    log_sd: list[tuple[float, float] | None]
    lift: list[float]

    def draws(self, op: OpSpec, usable: Sequence[Candidate],
              rng: np.random.Generator) -> list[float]:
        """One Thompson draw of each candidate's expected time (ms), in order: the same draws
        from ``rng`` as each model's ``predict_sample`` (or ``sample_ms``), lifted alike."""
        if None not in self.log_sd:  # one call for every draw: the same values, in order
            normals = rng.standard_normal(len(self.log_sd)).tolist()
            return [math.exp(params[0] + params[1] * z) * lift
                    for params, z, lift in zip(self.log_sd, normals, self.lift, strict=True)
                    if params is not None]
        out = []
        for i, params in enumerate(self.log_sd):
            if params is None:
                c = usable[i]
                draw = float(self.models[i].sample_ms(op, c.variant, rng))
            else:
                draw = math.exp(params[0] + params[1] * float(rng.standard_normal()))
            out.append(draw * self.lift[i])
        return out


class SwitchyardPolicy:
    """Thompson sampling over cost-model posteriors, under deadline and objective."""

    name = "switchyard"

    def __init__(self, cold_samples: int = COLD_SAMPLES,
                 explore_when_idle: bool = True) -> None:
        self.cold_samples = int(cold_samples)
        self.explore_when_idle = bool(explore_when_idle)
        self._priors = PriorModels()
        # On classes sharing a core: the expected occupancy routed there, and how much of it
        # explorations added over the best known pick (`_within_budget`).
        self.shared_routed_ms = 0.0
        self.shared_explored_ms = 0.0
        # Per workload routed there, until `settle`: the occupancy charged to the routed
        # total, the extra charged to explorations, and (an exploration) the best known
        # pick's expected occupancy, NaN otherwise.
        self._unsettled: OrderedDict[str, tuple[float, float, float]] = OrderedDict()

    # It keeps what it reads of the cost models per (op, precisions) in a snapshot's memo
    # (models/routing.py::choose).
    memoizes = True

    def decide(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        models: Mapping[str, CostModelLike],
        history: HistoryModel | None,
        rng: np.random.Generator,
        memo: dict[Any, Any] | None = None,
        group: Any = None,
    ) -> Decision:
        """Route ``workload`` to one of ``candidates``; see the module docstring. With a
        ``memo`` (one snapshot's: the same candidates' classes and variants, and the same
        ``models``, for every workload of one ``group`` — its op and precisions), the models
        are read once per group (`ModelTerms`); the decision is the same as without."""
        usable = eligible_candidates(workload, candidates)
        op = workload.op
        n = len(usable)
        read = remembered(memo, ("model terms", group),
                          lambda: self._model_terms(op, usable, models))
        mean_ms, std_ms, energy = read.mean_ms, read.std_ms, read.energy
        estimated, learned, versions, samples = (read.estimated, read.learned, read.versions,
                                                 read.samples)
        draw_ms = read.draws(op, usable, rng)
        # Plain floats, not NumPy: a decision weighs a handful of candidates, where each NumPy
        # operation cost more than the arithmetic (the decide stage's largest part; the
        # operations and their order are NumPy's, so the results are the same to the bit).
        # Per candidate: the wait to start; the one-time setup a probably-cold (shape,
        # variant) costs its executor (build/compile and warm-up); the transfer of the
        # workload's bytes to a remote class (models/transfer.py); what the executor spends
        # around the execution (inputs made, output checksummed); the price per device-hour.
        wait = [float(c.start_wait_ms) for c in usable]
        transfer = [float(c.transfer_ms) for c in usable]
        handling = [float(c.handling_ms) for c in usable]
        price = [float(c.price_per_hour) for c in usable]
        # The first run of a cold eager shape is one more execution besides its excess.
        setup = [float(c.setup_ms) + float(c.setup_runs) * mean_ms[i]
                 for i, c in enumerate(usable)]
        objective = dict(workload.objective)
        wants_energy = objective.get("energy", 0.0) > 0.0
        energy_fallback = wants_energy and any(e is None for e in energy)
        mean_energy = draw_energy = None
        if wants_energy and not energy_fallback:
            mean_energy = [float(e) for e in energy if e is not None]
            # Energy ~ power x time: the draw scales the energy by the sampled time ratio.
            draw_energy = [divide_plain(mean_energy[i] * draw_ms[i], mean_ms[i]) for i in range(n)]
        if energy_fallback:
            objective = {"latency": 1.0 - objective.get("cost", 0.0), "energy": 0.0,
                         "cost": objective.get("cost", 0.0)}

        besides = [setup[i] + transfer[i] + handling[i] for i in range(n)]  # besides the execution
        # On a core shared with other classes' executors: how much later the workload finishes
        # for their turns, and how much later their queued workloads finish for its own
        # (models/dispatch.py::shared_core_ms). The first is part of its completion; the
        # second is what choosing it costs the others, added to its score only.
        def beside(i: int, exec_ms: float) -> tuple[float, float]:
            left = usable[i].core_left
            return shared_core_ms(left, besides[i] + exec_ms) if left else (0.0, 0.0)

        if any(c.core_left for c in usable):
            shared = [beside(i, mean_ms[i]) for i in range(n)]
            completion = [wait[i] + besides[i] + mean_ms[i] + shared[i][0] for i in range(n)]
            delays = [shared[i][1] for i in range(n)]
            draw_completion = [wait[i] + besides[i] + draw_ms[i] + sum(beside(i, draw_ms[i]))
                               for i in range(n)]
        else:  # the same sums, without the shared-core terms' zeros (the common case)
            shared = [(0.0, 0.0)] * n
            completion = [wait[i] + besides[i] + mean_ms[i] for i in range(n)]
            delays = [0.0] * n
            draw_completion = [wait[i] + besides[i] + draw_ms[i] for i in range(n)]
        # What holding the device costs: its price over setup, transfer, handling, execution.
        cost = [price[i] * (besides[i] + mean_ms[i]) / HOUR_MS for i in range(n)]
        allowed = list(range(n))
        if workload.max_cost is not None:
            allowed = [i for i in allowed if cost[i] <= workload.max_cost * (1 + 1e-9)]
            if not allowed:
                cheapest = lowest_plain(cost)
                raise OverBudget(
                    f"no device class is predicted to stay within max_cost "
                    f"{workload.max_cost:g}: the cheapest, {usable[cheapest].device_class}, "
                    f"is predicted to cost {cost[cheapest]:.3g}")
        feasible = allowed if workload.deadline_ms is None else [
            i for i in allowed if meets(workload.deadline_ms, float(completion[i]))]
        pool = feasible or allowed
        if not feasible:
            # Nothing is predicted to make the deadline: finish as early as possible.
            objective = {"latency": 1.0, "energy": 0.0}
        wants_cost = objective.get("cost", 0.0) > 0.0
        idx = pool
        whole = len(idx) == n  # every candidate is in the pool (in order)

        def at(values: list[float]) -> list[float]:
            return values if whole else [values[i] for i in idx]

        # A cold shape's setup is weighed at its share (the rest spread over the shape's
        # expected repeats, models/setup.py::setup_share); completion and backlog keep it all.
        charged = [completion[i] + delays[i] for i in range(n)]
        if any(setup):
            rebate = [setup[i] * (1.0 - float(usable[i].setup_share)) for i in range(n)]
            charged = [charged[i] - rebate[i] for i in range(n)]
            draw_completion = [draw_completion[i] - rebate[i] for i in range(n)]
        greedy_scores = weighted_scores_plain(
            at(charged), None if mean_energy is None else at(mean_energy), objective,
            at(cost) if wants_cost else None)
        draw_cost = ([price[i] * (besides[i] + draw_ms[i]) / HOUR_MS for i in range(n)]
                     if wants_cost else None)
        draw_scores = weighted_scores_plain(
            at(draw_completion), None if draw_energy is None else at(draw_energy), objective,
            at(draw_cost) if draw_cost is not None else None)
        greedy_at = best_index_plain(greedy_scores, at(charged))
        greedy = idx[greedy_at]
        pick_at = best_index_plain(draw_scores, at(draw_completion))
        chosen = idx[pick_at]
        held_back = False  # an exploration held back for the best known, ready candidate
        if self.explore_when_idle:
            drawn = chosen
            chosen = self._explore_only_when_idle(
                chosen, greedy, idx, greedy_scores, wait, usable, mean_ms, learned, samples,
                besides, workload.id)
            held_back = chosen != drawn
            pick_at = idx.index(chosen)

        reason: Reason
        if not any(learned):
            reason = "fallback"
        elif not held_back and (samples[chosen] < self.cold_samples or (
                chosen != greedy and charged[chosen] > charged[greedy] * (1.0 + TIE))):
            reason = "explore"
        else:
            reason = "exploit"
        c = usable[chosen]

        def terms(i: int, score: float) -> dict[str, Any]:
            cand = usable[i]
            return {"device_class": cand.device_class, "precision": cand.variant.precision,
                    "mode": cand.variant.mode, "exec_ms": float(mean_ms[i]),
                    "transfer_ms": float(transfer[i]), "wait_ms": float(wait[i]),
                    "setup_ms": float(setup[i]), "setup_share": float(cand.setup_share),
                    "handling_ms": float(handling[i]),
                    "shared_core_ms": float(shared[i][0] + delays[i]),
                    "energy_j": energy[i],
                    "cost": float(cost[i]), "score": float(score)}

        pool_charged = at(charged)
        order = sorted(range(len(idx)),
                       key=lambda j: score_order_key(greedy_scores[j], pool_charged[j]))
        others = [terms(idx[j], greedy_scores[j])
                  for j in [j for j in order if idx[j] != chosen][:COMPARED_OTHERS]]
        return Decision(
            device_class=c.device_class,
            variant=c.variant,
            predicted_ms=float(mean_ms[chosen]),
            predicted_std_ms=float(std_ms[chosen]),
            predicted_energy_j=energy[chosen],
            reason=reason,
            meets_deadline=bool(feasible),
            model_version=versions[chosen],
            expected_wait_ms=float(wait[chosen]),
            score=float(draw_scores[pick_at]),
            energy_fallback=energy_fallback,
            setup_ms=float(setup[chosen]),
            transfer_ms=float(transfer[chosen]),
            handling_ms=float(handling[chosen]),
            cost=float(cost[chosen]),
            energy_estimated=estimated[chosen],
            compared=(terms(chosen, greedy_scores[pick_at]), *others),
        )

    def _model_terms(self, op: OpSpec, usable: Sequence[Candidate],
                     models: Mapping[str, CostModelLike]) -> ModelTerms:
        """What the cost models (learned, or the class's prior) say of ``op`` on each usable
        candidate, cold classes lifted (`_calibrate_cold`)."""
        n = len(usable)
        terms = ModelTerms([0.0] * n, [0.0] * n, [], [], [], [], [], [], [], [1.0] * n)
        for i, c in enumerate(usable):
            model, is_learned = self._priors.get(models, c.device_class, c.calibration)
            pred = model.predict_one(op, c.variant)
            terms.mean_ms[i], terms.std_ms[i] = float(pred.mean_ms), float(pred.std_ms)
            terms.models.append(model)
            # A CostModel's draw from its posterior (``predict_sample``) needs only these.
            fast = getattr(type(model), "predict_sample", None) is CostModel.predict_sample
            terms.log_sd.append((pred.log_mean, draw_log_sd(pred.param_var)) if fast else None)
            joules, guessed = pred.energy_j, False
            prior = getattr(model, "prior", None)
            if joules is None and not is_learned and prior is not None:
                # A class with no model yet: its prior's busy power over the predicted time
                # (a class that learned times but never energy cannot measure it: fallback).
                joules, guessed = float(prior.busy_power_w) * pred.mean_ms / 1e3, True
            terms.energy.append(joules)
            terms.estimated.append(guessed)
            terms.learned.append(is_learned)
            terms.versions.append(model.version if is_learned else 0)
            terms.samples.append(model.samples if is_learned else 0)
        self._calibrate_cold(op, usable, terms)
        return terms

    def _calibrate_cold(self, op: OpSpec, usable: Sequence[Candidate],
                        terms: ModelTerms) -> None:
        """Lift the prior of classes with no learned model by how much slower than *their*
        priors the learned classes run this op (the smallest such slowdown; never below 1), in
        place.

        A roofline prior is optimistic on every device alike (no kernel reaches peak; here the
        simulated fleet is slowed uniformly): a learned class has learned its slowdown, a cold
        one has not, so next to learned classes the cold one looked many times faster than it
        is and took whatever came while nothing of it had finished (issue 13: bmm and
        attention routed to a CPU core at the start of the sim-fp32 set, 10-15 s each behind
        a 1.5 s GPU queue). The smallest learned slowdown keeps the cold class as attractive
        as the best-calibrated learned one, so it is still explored."""
        learned, samples, mean_ms = terms.learned, terms.samples, terms.mean_ms
        cold = [i for i in range(len(usable)) if not learned[i]]
        warm = [i for i in range(len(usable)) if learned[i] and samples[i] > 0]
        if not cold or not warm:
            return
        lift = min(math.log(max(float(mean_ms[i]), 1e-12))
                   - self._priors.prior_log_ms(usable[i], op)
                   for i in warm)
        if lift <= 0.0:
            return
        factor = math.exp(lift)
        for i in cold:
            mean_ms[i] *= factor
            terms.lift[i] = factor  # each draw is lifted alike (``ModelTerms.draws``)
            terms.std_ms[i] *= factor
            joules = terms.energy[i]
            if terms.estimated[i] and joules is not None:
                terms.energy[i] = joules * factor

    def _explore_only_when_idle(self, chosen: int, greedy: int, idx: list[int],
                                greedy_scores: list[float], wait: list[float],
                                usable: Sequence[Candidate], mean_ms: list[float],
                                learned: list[bool], samples: list[int],
                                besides: list[float], workload_id: str = "") -> int:
        """``chosen``, unless it is an exploration (the draw's pick, not the means'; a class
        still near its prior; a shape whose setup there — beyond the warm-up run, the
        candidate's ``setup_ms`` — is unknown or costs more than the execution) on a class
        that is not idle and either busier than the greedy pick's or
        facing a compilation of unknown cost: then the best pick, by the means, among the
        known, ready candidates. A class sharing its cores with others (``core_busy``: their
        queued work there) is idle only while they are too: on one shared core a try of an
        unknown option takes its turns from everything else queued there (the live sets'
        first halves, BENCHMARKS.md: NumPy's softmax 132-540 ms beside torch's queue), and
        within the exploration budget there (`_within_budget`)."""
        def is_known(i: int) -> bool:
            c = usable[i]
            return (bool(learned[i]) and samples[i] >= self.cold_samples and not c.cold
                    and float(c.setup_ms) * float(c.setup_share) <= mean_ms[i])

        def occupancy(i: int) -> float:  # setup, transfer, handling and execution
            return besides[i] + mean_ms[i]

        if chosen == greedy and is_known(chosen):  # not an exploration
            if usable[chosen].shares_core:
                self._charge(workload_id, max(0.0, occupancy(chosen)), 0.0, math.nan)
            return chosen
        known = [is_known(i) for i in range(len(learned))]
        ready = [j for j, i in enumerate(idx) if known[int(i)]]
        best_known = idx[ready[lowest_plain([greedy_scores[j] for j in ready])]] if ready \
            else greedy
        pick = self._when_idle(chosen, greedy, idx, greedy_scores, wait, usable, mean_ms,
                               known, best_known)
        return self._within_budget(pick, best_known, usable, occupancy, workload_id)

    def _within_budget(self, pick: int, best_known: int, usable: Sequence[Candidate],
                       occupancy: Callable[[int], float], workload_id: str = "") -> int:
        """``pick``, unless it is an exploration on a class sharing its cores (``shares_core``)
        whose expected occupancy there (setup, handling, execution) beyond the best known
        pick's would take the explorations' extra past ``EXPLORE_SHARE`` of the occupancy
        routed to such classes, plus ``EXPLORE_ALLOWANCE_MS``: then ``best_known``. Each try of
        an unknown option there takes its turns from everything queued on the core, and a
        compiled variant's try costs ten ordinary workloads (the live bf16 set, 2026-12-07:
        35-40 % of its decisions explorations, 22 in its second half to JAX's compilations of
        100-400 ms, beside torch's queue). Counts are kept in the policy, for the worker's
        life, as expected until `settle` replaces a workload's by what its executor held it
        for."""
        if not usable[pick].shares_core:
            return pick
        extra = max(0.0, occupancy(pick) - occupancy(best_known)) if pick != best_known else 0.0
        if extra > 0.0 and (self.shared_explored_ms + extra
                            > EXPLORE_SHARE * self.shared_routed_ms + EXPLORE_ALLOWANCE_MS):
            pick = best_known
            extra = 0.0
        best = occupancy(best_known) if pick != best_known else math.nan
        self._charge(workload_id, max(0.0, occupancy(pick)), extra, best)
        return pick

    def _charge(self, workload_id: str, routed: float, extra: float, best: float) -> None:
        self.shared_routed_ms += routed
        self.shared_explored_ms += extra
        if workload_id:
            self._unsettled[workload_id] = (routed, extra, best)
            if len(self._unsettled) > UNSETTLED_KEPT:
                self._unsettled.popitem(last=False)

    def settle(self, workload_id: str, held_ms: float) -> None:
        """Replace what a workload routed to a shared core was charged to the budget
        (`_within_budget`) by what its executor held it for (``held_ms``: setup, handling and
        execution as they were): an exploration by its hold beyond the best known pick's
        expected occupancy, and the routed total by the hold. Expected costs err low where it
        matters most: on the live bf16 set (AMD EPYC, 2026-12-07) JAX's tries were charged
        setups of 48-244 ms that took 253-1,442 ms, and a try that looked no dearer than
        torch was charged nothing (a softmax held 259 ms against torch's expected 46).
        Unknown ids (another worker's, a decision before a restart) are ignored."""
        charged = self._unsettled.pop(workload_id, None)
        if charged is None or not math.isfinite(held_ms) or held_ms < 0.0:
            return
        routed, extra, best = charged
        self.shared_routed_ms += held_ms - routed
        if not math.isnan(best):
            self.shared_explored_ms += max(0.0, held_ms - best) - extra

    def _when_idle(self, chosen: int, greedy: int, idx: list[int], greedy_scores: list[float],
                   wait: list[float], usable: Sequence[Candidate], mean_ms: list[float],
                   known: list[bool], best_known: int) -> int:
        """`_explore_only_when_idle`'s rule (for an exploration), before the budget."""
        cold = [c.cold for c in usable]
        usable_modes = [c.variant.mode for c in usable]
        core_busy = [float(c.core_busy_ms) for c in usable]
        idle = max(IDLE_WAIT_MS, float(mean_ms[greedy]))
        # A compilation of unknown cost: a cold shape in a mode that compiles.
        compiles = [cold[i] and usable_modes[i] != "eager" for i in range(len(cold))]
        if wait[chosen] + core_busy[chosen] <= idle:
            return chosen
        if (wait[chosen] <= wait[greedy] + idle and not compiles[chosen]
                and core_busy[chosen] <= 0.0):
            # No more work ahead of it than ahead of the greedy pick (classes sharing a core
            # wait for the same work) and no compilation of unknown cost: the exploration
            # queues nothing the greedy pick would not. Held back there, a class never tried
            # stayed untried for as long as the shared queue was busy (issue 13, live bf16:
            # every workload to JAX, whose compilations kept that queue busy).
            return chosen
        if not any(known[int(i)] for i in idx):
            # Nothing is known yet (cold start): the best by the means, whose waits count the
            # work already routed, rather than the draw's pick behind a longer queue — and not
            # a compilation of unknown cost while another option compiles nothing (the live
            # bf16 set's first workloads, all to JAX's compiled variants by their priors,
            # queued seconds behind the first compilations on the shared core).
            plain = [j for j, i in enumerate(idx) if not compiles[int(i)]]
            if plain and compiles[greedy]:
                return idx[plain[lowest_plain([greedy_scores[j] for j in plain])]]
            return greedy
        return best_known

    def to_dict(self) -> dict[str, Any]:
        """name, options and state; `policy_from_dict` rebuilds it."""
        return {"name": self.name, "options": {"cold_samples": self.cold_samples,
                                                "explore_when_idle": self.explore_when_idle},
                "state": {}}


_POLICIES: dict[str, type] = {
    "switchyard": SwitchyardPolicy,
    "round_robin": RoundRobinPolicy,
    "random": RandomPolicy,
    "pow2": Pow2Policy,
    "jsq": JsqPolicy,
    "static": StaticPolicy,
    "dmda": DmdaPolicy,
    "oracle": OraclePolicy,
}
POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)


def make_policy(name: str, **options: Any) -> Policy:
    """A policy by name (`POLICY_NAMES`) with its options: ``static`` takes ``device_class``;
    ``dmda`` ``use_regression``/``calibrate_minimum``; ``oracle`` ``true_ms`` (required) and
    ``true_energy_j``; ``switchyard`` ``cold_samples`` and ``explore_when_idle``. ValueError for an unknown name."""
    try:
        cls = _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {POLICY_NAMES}") from None
    policy: Policy = cls(**options)
    return policy


def policy_from_dict(data: Mapping[str, Any], **extra_options: Any) -> Policy:
    """Rebuild a policy from `to_dict` output. Options that are functions (the oracle's
    ``true_ms``) cannot be serialised and are passed again in ``extra_options``."""
    policy = make_policy(str(data["name"]), **{**data.get("options", {}), **extra_options})
    load = getattr(policy, "load_state", None)
    if load is not None:
        load(data.get("state", {}))
    return policy
