"""Each policy's defining behaviour, and switchyard's learning on synthetic worlds."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from models.costmodel import CostModel
from models.decision import Candidate, Decision, class_representatives
from models.history import HistoryModel
from models.ops import OpSpec, Variant, parse_op
from models.policy import POLICY_NAMES, make_policy
from models.workload import Workload
from tests.models._cost_fixtures import random_mixed_ops

FP32 = Variant("fp32")
BF16 = Variant("bf16")
MATMUL = parse_op({"kind": "matmul", "m": 512, "k": 512, "n": 512})


def workload(
    op: OpSpec = MATMUL, precisions=("fp32",), deadline_ms=None, objective=None, wid="w"
) -> Workload:
    return Workload(
        id=wid,
        op=op,
        precisions=tuple(precisions),
        deadline_ms=deadline_ms,
        objective=objective or {"latency": 1.0, "energy": 0.0},
    )


def cands(*specs: tuple[str, float, int]) -> list[Candidate]:
    return [Candidate(cls, FP32, inst, backlog) for cls, backlog, inst in specs]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- class-level baselines ----------------------------------------------------------------
def test_round_robin_cycles_classes_in_name_order_ignoring_load() -> None:
    policy = make_policy("round_robin")
    offered = cands(("b", 0.0, 1), ("a", 1e6, 1), ("c", 0.0, 1))
    picks = [policy.decide(workload(), offered, {}, None, rng()).device_class for _ in range(6)]
    assert picks == ["a", "b", "c", "a", "b", "c"]


def test_random_is_deterministic_given_rng_and_covers_every_class() -> None:
    offered = cands(("a", 0.0, 1), ("b", 0.0, 1), ("c", 0.0, 1))
    first = [
        make_policy("random").decide(workload(), offered, {}, None, r).device_class
        for r in [rng(1)]
        for _ in range(60)
    ]
    r2 = rng(1)
    second = [
        make_policy("random").decide(workload(), offered, {}, None, r2).device_class
        for _ in range(60)
    ]
    assert first == second
    assert set(first) == {"a", "b", "c"}


def test_pow2_never_picks_the_strictly_longest_queue() -> None:
    policy, r = make_policy("pow2"), rng(3)
    offered = cands(("a", 10.0, 1), ("b", 20.0, 1), ("c", 30.0, 1), ("d", 1000.0, 1))
    picks = Counter(
        policy.decide(workload(), offered, {}, None, r).device_class for _ in range(300)
    )
    assert "d" not in picks
    assert picks["a"] > picks["b"] > picks["c"] > 0


def test_jsq_divides_backlog_by_live_instances() -> None:
    policy = make_policy("jsq")
    offered = cands(("one", 20.0, 1), ("ten", 100.0, 10))
    decision = policy.decide(workload(), offered, {}, None, rng())
    assert decision.device_class == "ten"
    assert decision.expected_wait_ms == pytest.approx(10.0)


def test_jsq_breaks_ties_randomly() -> None:
    policy, r = make_policy("jsq"), rng(5)
    offered = cands(("a", 0.0, 1), ("b", 0.0, 1))
    assert {policy.decide(workload(), offered, {}, None, r).device_class for _ in range(40)} == {
        "a",
        "b",
    }


def test_static_uses_fp32_eager_when_allowed_else_first_allowed() -> None:
    policy = make_policy("static", device_class="x")
    offered = [Candidate("x", BF16), Candidate("x", FP32), Candidate("y", FP32)]
    both = workload(precisions=("bf16", "fp32"))
    assert policy.decide(both, offered, {}, None, rng()).variant == FP32
    only_bf16 = workload(precisions=("bf16",))
    assert policy.decide(only_bf16, offered, {}, None, rng()).variant == BF16


def test_static_falls_back_when_its_class_is_gone() -> None:
    policy = make_policy("static", device_class="gone")
    decision = policy.decide(workload(), cands(("a", 5.0, 1), ("b", 1.0, 1)), {}, None, rng())
    assert decision.reason == "fallback" and decision.device_class == "b"


def test_class_representatives_one_per_class() -> None:
    reps = class_representatives([Candidate("b", BF16), Candidate("a", BF16), Candidate("a", FP32)])
    assert [(c.device_class, c.variant.precision) for c in reps] == [("a", "fp32"), ("b", "bf16")]


# -- dmda ---------------------------------------------------------------------------------
def test_dmda_calibrates_every_option_then_picks_earliest_finish() -> None:
    policy, history = make_policy("dmda", calibrate_minimum=3), HistoryModel()
    true = {"fast": 1.0, "slow": 5.0}
    offered = cands(("fast", 0.0, 1), ("slow", 0.0, 1))
    seen = []
    for _ in range(10):
        d = policy.decide(workload(), offered, {}, history, rng())
        seen.append((d.device_class, d.reason))
        history.observe(d.device_class, MATMUL, d.variant, true[d.device_class])
    assert Counter(c for c, r in seen if r == "explore") == {"fast": 3, "slow": 3}
    assert all(c == "fast" and r == "exploit" for c, r in seen[6:])
    # A long enough queue on the fast class makes the slow one finish first.
    busy = cands(("fast", 10.0, 1), ("slow", 0.0, 1))
    d = policy.decide(workload(), busy, {}, history, rng())
    assert d.device_class == "slow" and d.predicted_ms == pytest.approx(5.0)


def test_dmda_uses_power_law_for_unseen_shapes_when_asked() -> None:
    history = HistoryModel(calibrate_minimum=1)
    for n in (64, 128, 256, 512):
        op = parse_op({"kind": "matmul", "m": n, "k": n, "n": n})
        history.observe("a", op, FP32, 1e-6 * op.flops())
        history.observe("b", op, FP32, 3e-6 * op.flops())
    unseen = workload(parse_op({"kind": "matmul", "m": 300, "k": 300, "n": 300}))
    offered = cands(("a", 0.0, 1), ("b", 0.0, 1))
    assert make_policy("dmda").decide(unseen, offered, {}, history, rng()).reason == "explore"
    d = make_policy("dmda", use_regression=True).decide(unseen, offered, {}, history, rng())
    assert d.reason == "exploit" and d.device_class == "a"


def test_dmda_without_history_is_a_fallback() -> None:
    d = make_policy("dmda").decide(workload(), cands(("a", 3.0, 1), ("b", 1.0, 1)), {}, None, rng())
    assert d.reason == "fallback" and d.device_class == "b"


# -- oracle -------------------------------------------------------------------------------
def test_oracle_picks_earliest_true_finish_over_variants() -> None:
    costs = {("a", "fp32"): 10.0, ("a", "bf16"): 4.0, ("b", "fp32"): 5.0, ("b", "bf16"): 3.0}
    policy = make_policy("oracle", true_ms=lambda cls, op, v: costs[(cls, v.precision)])
    offered = [
        Candidate(c, v, 1, backlog) for c, backlog in (("a", 0.0), ("b", 2.0)) for v in (FP32, BF16)
    ]
    d = policy.decide(workload(precisions=("fp32", "bf16")), offered, {}, None, rng())
    assert (d.device_class, d.variant) == ("a", BF16)  # 4 < 2 + 3
    assert d.predicted_ms == 4.0 and d.reason == "exploit"
    d = policy.decide(workload(precisions=("fp32",)), offered, {}, None, rng())
    assert (d.device_class, d.variant) == ("b", FP32)  # 2 + 5 < 10


def test_oracle_requires_true_costs() -> None:
    with pytest.raises(ValueError):
        make_policy("oracle")


def test_unknown_policy_name() -> None:
    with pytest.raises(ValueError):
        make_policy("nope")


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_rejects_an_empty_or_disallowed_offer(name: str) -> None:
    policy = make_policy(name, **({"true_ms": lambda *a: 1.0} if name == "oracle" else {}))
    with pytest.raises(ValueError):
        policy.decide(workload(), [], {}, None, rng())
    with pytest.raises(ValueError):
        policy.decide(workload(precisions=("fp32",)), [Candidate("a", BF16)], {}, None, rng())
    with pytest.raises(ValueError):
        policy.decide(workload(), [Candidate("a", FP32, live_instances=0)], {}, None, rng())


# -- switchyard ---------------------------------------------------------------------------
def test_switchyard_falls_back_on_roofline_priors_without_models() -> None:
    policy = make_policy("switchyard")
    big = workload(parse_op({"kind": "matmul", "m": 4096, "k": 4096, "n": 4096}))
    d = policy.decide(big, cands(("sim-cpu-core", 0.0, 1), ("sim-h100", 0.0, 1)), {}, None, rng())
    assert d.reason == "fallback" and d.device_class == "sim-h100"
    assert d.model_version == 0 and d.predicted_ms > 0


def _two_class_world(seed: int, n: int):
    """Class "numpy-cpu-a" is 3x faster than "numpy-cpu-b" on GEMMs and 3x slower on
    normalisations; both start from the same generic prior."""
    r = rng(seed)
    ops = random_mixed_ops(r, n)
    base = CostModel.for_class("numpy-cpu-a")

    def true_ms(cls: str, op: OpSpec, v: Variant) -> float:
        gemm = op.kind in ("matmul", "linear", "attention")
        factor = 1.0 if gemm == (cls == "numpy-cpu-a") else 3.0
        return base.prior_ms(op, v) * factor

    return r, ops, true_ms


def test_switchyard_explores_early_then_exploits_the_truly_faster_class() -> None:
    r, ops, true_ms = _two_class_world(11, 400)
    models = {c: CostModel.for_class(c) for c in ("numpy-cpu-a", "numpy-cpu-b")}
    policy = make_policy("switchyard")
    offered = cands(("numpy-cpu-a", 0.0, 1), ("numpy-cpu-b", 0.0, 1))
    reasons, correct = [], []
    for i, op in enumerate(ops):
        d = policy.decide(workload(op, wid=f"w{i}"), offered, models, None, r)
        truth = {c.device_class: true_ms(c.device_class, op, FP32) for c in offered}
        reasons.append(d.reason)
        correct.append(truth[d.device_class] == min(truth.values()))
        measured = truth[d.device_class] * math.exp(r.normal(0.0, 0.1))
        models[d.device_class].learn_one(op, d.variant, measured)
    assert reasons[:32].count("explore") >= 16
    late_reasons, late_correct = reasons[150:], correct[150:]
    assert late_reasons.count("exploit") / len(late_reasons) >= 0.95
    assert sum(late_correct) / len(late_correct) >= 0.95


def test_switchyard_weighs_backlog_per_instance() -> None:
    models = {c: CostModel.for_class(c) for c in ("sim-h100", "sim-a100")}
    policy = make_policy("switchyard")
    idle = policy.decide(
        workload(), cands(("sim-h100", 0.0, 1), ("sim-a100", 0.0, 1)), models, None, rng()
    )
    assert idle.device_class == "sim-h100"
    busy = policy.decide(
        workload(), cands(("sim-h100", 100.0, 1), ("sim-a100", 0.0, 1)), models, None, rng()
    )
    assert busy.device_class == "sim-a100" and busy.expected_wait_ms == 0.0
    shared = policy.decide(
        workload(), cands(("sim-h100", 1.0, 1000), ("sim-a100", 0.0, 1)), models, None, rng()
    )
    assert shared.device_class == "sim-h100" and shared.expected_wait_ms == pytest.approx(0.001)


def _energy_models() -> dict[str, CostModel]:
    """ "fast" takes 1 ms at 300 J/s; "frugal" 3 ms at 20 J/s (0.3 J vs 0.06 J)."""
    models = {c: CostModel.for_class(c) for c in ("torch-cpu-fast", "torch-cpu-frugal")}
    for _ in range(60):
        models["torch-cpu-fast"].learn_one(MATMUL, FP32, 1.0, 0.3)
        models["torch-cpu-frugal"].learn_one(MATMUL, FP32, 3.0, 0.06)
    return models


def test_energy_objective_picks_the_lower_energy_class() -> None:
    models, policy = _energy_models(), make_policy("switchyard")
    offered = cands(("torch-cpu-fast", 0.0, 1), ("torch-cpu-frugal", 0.0, 1))
    latency = policy.decide(workload(), offered, models, None, rng())
    energy = policy.decide(
        workload(objective={"latency": 0.0, "energy": 1.0}), offered, models, None, rng()
    )
    assert latency.device_class == "torch-cpu-fast"
    assert energy.device_class == "torch-cpu-frugal" and not energy.energy_fallback
    assert energy.predicted_energy_j == pytest.approx(0.06, rel=0.1)
    # A mix weighs ratios to the best: fast 0.5*1 + 0.5*(0.3/0.06) = 3.0, frugal 0.5*3 + 0.5*1 = 2.0.
    mixed = policy.decide(
        workload(objective={"latency": 0.5, "energy": 0.5}), offered, models, None, rng()
    )
    assert mixed.device_class == "torch-cpu-frugal"
    latency_heavy = workload(objective={"latency": 0.9, "energy": 0.1})
    assert (
        policy.decide(latency_heavy, offered, models, None, rng()).device_class == "torch-cpu-fast"
    )


def test_energy_objective_falls_back_on_latency_without_energy_data() -> None:
    models = _energy_models()
    models["torch-cpu-frugal"] = CostModel.for_class("torch-cpu-frugal")
    for _ in range(60):
        models["torch-cpu-frugal"].learn_one(MATMUL, FP32, 3.0, None)
    offered = cands(("torch-cpu-fast", 0.0, 1), ("torch-cpu-frugal", 0.0, 1))
    d = make_policy("switchyard").decide(
        workload(objective={"latency": 0.0, "energy": 1.0}), offered, models, None, rng()
    )
    assert d.energy_fallback and d.device_class == "torch-cpu-fast"


def test_deadline_prefers_candidates_that_meet_it() -> None:
    models, policy = _energy_models(), make_policy("switchyard")
    offered = cands(("torch-cpu-fast", 0.0, 1), ("torch-cpu-frugal", 0.0, 1))
    d = policy.decide(
        workload(deadline_ms=2.0, objective={"latency": 0.0, "energy": 1.0}),
        offered,
        models,
        None,
        rng(),
    )
    assert d.device_class == "torch-cpu-fast" and d.meets_deadline
    relaxed = policy.decide(
        workload(deadline_ms=10.0, objective={"latency": 0.0, "energy": 1.0}),
        offered,
        models,
        None,
        rng(),
    )
    assert relaxed.device_class == "torch-cpu-frugal" and relaxed.meets_deadline


def test_deadline_nobody_can_meet_is_marked_and_finishes_earliest() -> None:
    models, policy = _energy_models(), make_policy("switchyard")
    offered = cands(("torch-cpu-fast", 5.0, 1), ("torch-cpu-frugal", 0.0, 1))
    d = policy.decide(
        workload(deadline_ms=0.5, objective={"latency": 0.0, "energy": 1.0}),
        offered,
        models,
        None,
        rng(),
    )
    assert not d.meets_deadline
    assert d.device_class == "torch-cpu-frugal"  # 3 ms beats 5 + 1 ms


def test_switchyard_chooses_the_variant_too() -> None:
    models = {"sim-h100": CostModel.for_class("sim-h100")}
    offered = [Candidate("sim-h100", FP32), Candidate("sim-h100", BF16)]
    big = workload(
        parse_op({"kind": "matmul", "m": 4096, "k": 4096, "n": 4096}), precisions=("fp32", "bf16")
    )
    assert make_policy("switchyard").decide(big, offered, models, None, rng()).variant == BF16
    fp32_only = workload(big.op, precisions=("fp32",))
    assert make_policy("switchyard").decide(fp32_only, offered, models, None, rng()).variant == FP32


def test_decision_to_dict_is_json_ready() -> None:
    d = make_policy("switchyard").decide(workload(), cands(("sim-h100", 0.0, 1)), {}, None, rng())
    out = d.to_dict()
    assert out["variant"] == {"precision": "fp32", "mode": "eager"}
    assert set(out) >= {
        "device_class",
        "predicted_ms",
        "predicted_std_ms",
        "predicted_energy_j",
        "reason",
        "meets_deadline",
        "model_version",
        "expected_wait_ms",
        "score",
    }


def _run_world(policy, models, offered_at, true_ms, ops, r):
    """Decide, 'execute' with 10% noise, learn; returns (class, op, reason) per step."""
    log = []
    for i, op in enumerate(ops):
        offered = offered_at(i)
        d = policy.decide(workload(op, wid=f"w{i}"), offered, models, None, r)
        measured = true_ms(i, d.device_class, op) * math.exp(r.normal(0.0, 0.1))
        models.setdefault(d.device_class, CostModel.for_class(d.device_class))
        models[d.device_class].learn_one(op, d.variant, measured)
        log.append((d.device_class, op, d.reason))
    return log


def test_switchyard_moves_off_a_class_that_slows_down_4x() -> None:
    r, ops, base_true = _two_class_world(12, 450)

    def true_ms(step: int, cls: str, op: OpSpec) -> float:
        slow = 4.0 if cls == "numpy-cpu-a" and step >= 200 else 1.0
        return base_true(cls, op, FP32) * slow

    models = {c: CostModel.for_class(c) for c in ("numpy-cpu-a", "numpy-cpu-b")}
    offered = cands(("numpy-cpu-a", 0.0, 1), ("numpy-cpu-b", 0.0, 1))
    log = _run_world(make_policy("switchyard"), models, lambda i: offered, true_ms, ops, r)
    gemm = [cls for cls, op, _ in log if op.kind in ("matmul", "linear", "attention")]
    gemm_steps = [
        i for i, (_, op, _) in enumerate(log) if op.kind in ("matmul", "linear", "attention")
    ]
    before = [c for c, i in zip(gemm, gemm_steps, strict=True) if 100 <= i < 200]
    after = [c for c, i in zip(gemm, gemm_steps, strict=True) if i >= 230]
    assert before.count("numpy-cpu-a") / len(before) >= 0.9
    assert after.count("numpy-cpu-b") / len(after) >= 0.8


def test_switchyard_explores_a_new_class_and_adopts_it_when_faster() -> None:
    r, ops, base_true = _two_class_world(13, 400)

    def true_ms(step: int, cls: str, op: OpSpec) -> float:
        if cls == "numpy-cpu-new":
            return min(base_true("numpy-cpu-a", op, FP32), base_true("numpy-cpu-b", op, FP32)) / 3
        return base_true(cls, op, FP32)

    old = cands(("numpy-cpu-a", 0.0, 1), ("numpy-cpu-b", 0.0, 1))
    joined = old + cands(("numpy-cpu-new", 0.0, 1))
    models = {c: CostModel.for_class(c) for c in ("numpy-cpu-a", "numpy-cpu-b")}
    log = _run_world(
        make_policy("switchyard"), models, lambda i: old if i < 150 else joined, true_ms, ops, r
    )
    first_new = next(i for i, (cls, _, _) in enumerate(log) if cls == "numpy-cpu-new")
    assert 150 <= first_new < 170  # tried soon after it joins (no model yet: the prior)
    late = [cls for cls, _, _ in log[250:]]
    assert late.count("numpy-cpu-new") / len(late) >= 0.9


def test_switchyard_charges_the_setup_of_a_cold_shape() -> None:
    """Two equal classes; one would first have to build and warm this shape up (200 ms): the
    policy goes to the warm one, and says what it charged."""
    models = {c: CostModel.for_class(c) for c in ("sim-h100", "sim-h200")}
    policy = make_policy("switchyard")
    for seed in range(20):
        warm, cold = (Candidate("sim-h100", FP32, 1, 0.0, setup_ms=200.0),
                      Candidate("sim-h200", FP32, 1, 0.0))
        decision = policy.decide(workload(), [warm, cold], models, None, rng(seed))
        assert decision.device_class == "sim-h200" and decision.setup_ms == 0.0
    only = policy.decide(workload(), [Candidate("sim-h100", FP32, 1, 0.0, setup_ms=200.0)],
                         models, None, rng())
    assert only.setup_ms == 200.0


def test_switchyard_explores_an_unknown_variant_only_while_its_class_is_idle() -> None:
    """An unknown compiled variant (cold, its setup never measured) is tried while the class
    is idle; behind a queue, the known, warm variant is routed instead (issue 13: exploration
    that pays for itself)."""
    compiled = Variant("fp32", "compiled")
    model = CostModel.for_class("jax-cpu-x")
    for _ in range(60):
        model.learn_one(MATMUL, FP32, 3.0)
    models = {"jax-cpu-x": model}

    def picks(backlog_ms: float, policy_options: dict) -> list:
        policy = make_policy("switchyard", **policy_options)
        offered = [Candidate("jax-cpu-x", FP32, 1, backlog_ms),
                   Candidate("jax-cpu-x", compiled, 1, backlog_ms, cold=True)]
        return [policy.decide(workload(), offered, models, None, rng(seed))
                for seed in range(200)]

    idle = picks(0.0, {})
    assert sum(d.variant == compiled for d in idle) >= 20  # tried while idle
    for backlog in (4.0, 20.0):
        busy = picks(backlog, {})
        assert all(d.variant == FP32 and d.reason == "exploit" for d in busy)
    # The rule is what keeps it off a busy class: without it the draw still tries it.
    unguarded = picks(20.0, {"explore_when_idle": False})
    assert sum(d.variant == compiled for d in unguarded) >= 20


def test_switchyard_at_a_cold_start_routes_by_the_means_behind_a_queue() -> None:
    """Cold start under load: nothing is known and ready, so an exploration that would wait
    behind more work than the best by the means is not made: that best goes (the draws of
    wide priors sent the first workloads of the live bf16 set anywhere, each new option a
    warm-up on a busy core). A class with nothing queued is still tried, and so is one no
    busier than the best by the means: exploration goes on where it costs no extra wait."""
    models: dict = {}
    policy = make_policy("switchyard")
    busy = [Candidate("sim-h100", FP32, 1, 50.0, cold=True),
            Candidate("sim-a100", FP32, 1, 500.0, cold=True)]
    decisions = [policy.decide(workload(), busy, models, None, rng(seed)) for seed in range(50)]
    assert {d.device_class for d in decisions} == {"sim-h100"}  # the faster by its prior
    for a100_wait in (0.0, 50.0):
        offered = [Candidate("sim-h100", FP32, 1, 50.0, cold=True),
                   Candidate("sim-a100", FP32, 1, a100_wait, cold=True)]
        chosen = {policy.decide(workload(), offered, models, None, rng(seed)).device_class
                  for seed in range(50)}
        assert "sim-a100" in chosen
    # Nor does a compilation of unknown cost go behind the queue while an option compiles
    # nothing, even when the priors rank it first (here: a tie, listed first).
    compiled = Variant("fp32", "compiled")
    with_compiled = [Candidate("sim-h100", compiled, 1, 50.0, cold=True), *busy]
    assert {policy.decide(workload(), with_compiled, models, None, rng(seed)).variant
            for seed in range(50)} == {FP32}
    # Without the rule, the draw decides behind the queue as well.
    unguarded = make_policy("switchyard", explore_when_idle=False)
    assert {unguarded.decide(workload(), with_compiled, models, None, rng(seed)).variant
            for seed in range(50)} == {FP32, compiled}


def test_switchyard_tries_a_new_class_no_busier_than_the_greedy_pick() -> None:
    """A busy shared queue: one class is known, another (eager, never tried) waits behind the
    same work (classes pinned to one core). Trying it queues nothing the known class would
    not, so the draw may pick it; a compiled variant of unknown setup there, or the same class
    behind a longer queue of its own, is still held back (issue 13, live bf16: a class never
    tried stayed untried while the shared queue was busy)."""
    compiled = Variant("fp32", "compiled")
    known = CostModel.for_class("jax-cpu-x")
    for _ in range(60):
        known.learn_one(MATMUL, FP32, 3.0)
    models = {"jax-cpu-x": known}

    def picks(offered: list[Candidate]) -> Counter:
        policy = make_policy("switchyard")
        return Counter((d.device_class, d.variant.mode) for d in (
            policy.decide(workload(), offered, models, None, rng(seed)) for seed in range(200)))

    shared = picks([Candidate("jax-cpu-x", FP32, 1, 500.0),
                    Candidate("torch-cpu-x", FP32, 1, 500.0, cold=True)])
    assert shared[("torch-cpu-x", "eager")] >= 20
    cold_compiled = picks([Candidate("jax-cpu-x", FP32, 1, 500.0),
                           Candidate("torch-cpu-x", compiled, 1, 500.0, cold=True)])
    assert set(cold_compiled) == {("jax-cpu-x", "eager")}
    longer = picks([Candidate("jax-cpu-x", FP32, 1, 500.0),
                    Candidate("torch-cpu-x", FP32, 1, 900.0, cold=True)])
    assert set(longer) == {("jax-cpu-x", "eager")}


def test_switchyard_lifts_a_cold_class_prior_by_the_learned_classes_slowdown() -> None:
    """Every learned class runs this bmm 7x slower than its roofline prior (the simulated
    fleet slowed uniformly; real kernels below peak): a class with no model yet is taken to be
    as slow against its own prior, so a CPU core whose prior says 1.4 s (truly 10 s) does not
    look better than a 1.5 s GPU queue (issue 13, sim-fp32 set)."""
    bmm = parse_op({"kind": "bmm", "b": 16, "m": 2048, "k": 2048, "n": 2048})

    def trained(slowdown: float) -> dict[str, CostModel]:
        models = {c: CostModel.for_class(c) for c in ("sim-h100", "sim-l4")}
        for model in models.values():
            for _ in range(60):
                model.learn_one(bmm, FP32, model.prior_ms(bmm, FP32) * slowdown)
        return models

    offered = [Candidate("sim-h100", FP32, 1, 1500.0), Candidate("sim-l4", FP32, 1, 1500.0),
               Candidate("sim-cpu-core", FP32, 1, 0.0)]
    for seed in range(20):
        d = make_policy("switchyard").decide(workload(bmm), offered, trained(7.0), None,
                                             rng(seed))
        assert d.device_class != "sim-cpu-core"
    # Learned classes that run at their priors lend no lift: the idle CPU core's prior is the
    # best mean, and the draws pick it often.
    picks = [make_policy("switchyard").decide(workload(bmm), offered, trained(1.0), None,
                                              rng(seed)) for seed in range(20)]
    on_cpu = [d for d in picks if d.device_class == "sim-cpu-core"]
    assert len(on_cpu) >= 5
    assert on_cpu[0].predicted_ms == pytest.approx(
        CostModel.for_class("sim-cpu-core").prior_ms(bmm, FP32))


def test_the_plain_float_scores_are_numpys_to_the_bit() -> None:
    """SwitchyardPolicy weighs its candidates in plain floats (models/policy.py): the scores,
    the pick (ties by latency, nan last) and the argmin are NumPy's on the same values."""
    from models.decision import best_index, weighted_scores
    from models.decision import best_index_plain as _best_index
    from models.decision import divide_plain as _divide
    from models.decision import lowest_plain as _lowest
    from models.decision import weighted_scores_plain as _weighted_scores

    gen = np.random.default_rng(4)
    objectives = [{"latency": 1.0, "energy": 0.0}, {"latency": 0.5, "energy": 0.5},
                  {"latency": 0.0, "energy": 1.0}, {"latency": 0.6, "energy": 0.0, "cost": 0.4},
                  {"latency": 0.0, "energy": 0.0, "cost": 1.0},
                  {"latency": 0.4, "energy": 0.3, "cost": 0.3}]
    for trial in range(500):
        n = int(gen.integers(1, 9))
        latency = gen.choice([0.5, 1.0, 3.0, 7.25], n) if trial % 3 == 0 else gen.uniform(0, 99, n)
        energy = gen.uniform(0.01, 5, n)
        cost = gen.choice([0.0, 1e-6, 3e-6], n)
        if trial % 7 == 0:
            latency[int(gen.integers(n))] = np.nan
        if trial % 11 == 0:
            latency[int(gen.integers(n))] = np.inf
        objective = objectives[trial % len(objectives)]
        with np.errstate(invalid="ignore"):
            expected = weighted_scores(latency, energy, objective, cost)
        # Plain Python floats, as the policy has them.
        plain_latency = [float(v) for v in latency]
        got = _weighted_scores(plain_latency, [float(v) for v in energy], objective,
                               [float(v) for v in cost])
        np.testing.assert_array_equal(np.asarray(got, dtype=float), expected)
        assert _best_index(got, plain_latency) == best_index(expected, latency)
        assert _lowest(plain_latency) == int(np.argmin(latency))
    with np.errstate(divide="ignore", invalid="ignore"):
        for num, den in [(3.0, 0.0), (-3.0, 0.0), (3.0, -0.0), (0.0, 0.0), (6.0, 4.0)]:
            assert np.array_equal(_divide(num, den), np.float64(num) / np.float64(den),
                                  equal_nan=True)


def test_switchyard_explores_a_class_on_a_shared_core_only_while_the_core_is_idle() -> None:
    """Torch is known (3 ms, 60 samples); NumPy, on the same core, was never tried. With
    nothing queued on the core the draw tries NumPy now and then; with work queued on torch,
    NumPy's own queue is empty but its core is not (``core_busy_ms``): a try would take its
    turns from that work, so the known class goes. Without the core's work counted, NumPy's
    empty queue let the tries through (the live sets' first halves)."""
    torch = CostModel.for_class("torch-cpu-x86")
    for _ in range(60):
        torch.learn_one(MATMUL, FP32, 3.0)
    models = {"torch-cpu-x86": torch}
    policy = make_policy("switchyard")

    def picks(torch_backlog: float, numpy_core_busy: float) -> set[str]:
        offered = [Candidate("torch-cpu-x86", FP32, 1, torch_backlog, device_wait_ms=torch_backlog),
                   Candidate("numpy-cpu-x86", FP32, 1, 0.0, device_wait_ms=0.0,
                             core_busy_ms=numpy_core_busy)]
        return {policy.decide(workload(), offered, models, None, rng(seed)).device_class
                for seed in range(200)}

    assert picks(0.0, 0.0) == {"torch-cpu-x86", "numpy-cpu-x86"}
    assert picks(40.0, 40.0) == {"torch-cpu-x86"}
    assert "numpy-cpu-x86" in picks(40.0, 0.0)  # cores not shared: not held back


def test_switchyard_weighs_the_turns_a_shared_core_takes_from_queued_work() -> None:
    """Torch and NumPy, both known, on one core; torch holds 9 ms in 3 workloads, NumPy
    nothing. At the same speed, NumPy finishes a 3 ms op sooner (6 ms, taking turns with
    torch's queue) than torch (12 ms, behind it), but delays each of torch's workloads by
    3 ms: 15 ms of completion in all against 12, and the op stays on torch. Where NumPy is
    3x faster, the saving outweighs the turns it takes and the op goes to NumPy. Counted by
    its own finish alone (the earliest-finish choice), the idle neighbour won both."""
    def model(name: str, ms: float) -> CostModel:
        m = CostModel.for_class(name)
        for _ in range(80):
            m.learn_one(MATMUL, FP32, ms)
        return m

    policy = make_policy("switchyard")

    def picks(numpy_ms: float, shared: bool) -> set[str]:
        models = {"torch-cpu-x86": model("torch-cpu-x86", 3.0),
                  "numpy-cpu-x86": model("numpy-cpu-x86", numpy_ms)}
        offered = [Candidate("torch-cpu-x86", FP32, 1, 9.0, device_wait_ms=9.0),
                   Candidate("numpy-cpu-x86", FP32, 1, 0.0, device_wait_ms=0.0,
                             core_busy_ms=9.0 if shared else 0.0,
                             core_left=((9.0, 3.0),) if shared else ())]
        decisions = [policy.decide(workload(), offered, models, None, rng(seed))
                     for seed in range(50)]
        if shared:
            chosen = [d for d in decisions if d.device_class == "numpy-cpu-x86"]
            for d in chosen:
                assert d.compared[0]["shared_core_ms"] > 0.0
        return {d.device_class for d in decisions}

    assert picks(3.0, shared=True) == {"torch-cpu-x86"}
    assert picks(3.0, shared=False) == {"numpy-cpu-x86"}
    assert picks(1.0, shared=True) == {"numpy-cpu-x86"}


def test_model_terms_draw_what_each_model_would_draw_in_order() -> None:
    """`ModelTerms.draws` takes every candidate's Thompson draw from one call on the
    generator when all are CostModels; the values are those of one ``predict_sample`` (or
    ``sample_ms``) per candidate, in order, with a mixed set (a non-CostModel among them)
    as well."""
    from models.history import HistoryCostModel
    from models.policy import SwitchyardPolicy

    op = parse_op({"kind": "matmul", "m": 128, "k": 256, "n": 64})
    learned = CostModel.for_class("sim-h100")
    learned.learn_many([(op, FP32, 0.4, None)] * 5)
    other = CostModel.for_class("sim-l4")
    usable = [Candidate("sim-h100", FP32), Candidate("sim-l4", FP32),
              Candidate("sim-l4", Variant("fp32", "compiled"))]
    models = {"sim-h100": learned, "sim-l4": other}
    policy = SwitchyardPolicy()
    for mixed in (False, True):
        if mixed:
            models["sim-l4"] = HistoryCostModel("sim-l4")
        terms = policy._model_terms(op, usable, models)
        assert (None in terms.log_sd) is mixed
        ours, theirs = np.random.default_rng(11), np.random.default_rng(11)
        got = terms.draws(op, usable, ours)
        want = [float(terms.models[i].sample_ms(op, c.variant, theirs)) * terms.lift[i]
                for i, c in enumerate(usable)]
        assert got == pytest.approx(want, rel=1e-12)
        assert len(set(got)) == len(got)  # three draws, not one repeated
        assert ours.standard_normal() == theirs.standard_normal()  # the generator moved alike


def test_switchyard_spreads_a_cold_shape_setup_over_the_times_the_shape_came_before() -> None:
    """A shape routed n times before is taken to come n more: a cold class with 5 ms of setup
    beside an equal warm one with 1 ms queued loses the first time the shape comes and wins
    once it has come five times (its setup weighed at 1/6: 0.83 ms). The decision still
    carries the whole setup: the backlog is charged all of it."""
    model = CostModel.for_class("sim-h100")
    models = {"sim-h100": model, "sim-a100": model}  # the same predictions for both
    policy = make_policy("switchyard")

    def pick(share: float) -> Decision:
        cold = Candidate("sim-h100", FP32, 1, 0.0, setup_ms=5.0, setup_share=share)
        warm = Candidate("sim-a100", FP32, 1, 1.0)
        return policy.decide(workload(), [cold, warm], models, None, rng(0))

    assert pick(1.0).device_class == "sim-a100"
    later = pick(1.0 / 6.0)
    assert later.device_class == "sim-h100" and later.setup_ms == pytest.approx(5.0)
    assert later.compared[0]["setup_share"] == pytest.approx(1.0 / 6.0)


def test_explorations_on_a_shared_core_spend_at_most_their_budget() -> None:
    """Torch is known (3 ms); JAX, on the same core, has never run the shape: a try would
    set it up for 150 ms (spread over many expected repeats, so the draw weighs 1.5 of it).
    With the core idle, the draws try JAX again and again where the cores are not shared;
    on a shared core the tries' time beyond torch's stays within ``EXPLORE_SHARE`` of the
    time routed there plus ``EXPLORE_ALLOWANCE_MS``, and routing more known work lets a try
    through again."""
    from models.policy import EXPLORE_ALLOWANCE_MS, EXPLORE_SHARE, SwitchyardPolicy

    torch = CostModel.for_class("torch-cpu-x86")
    for _ in range(60):
        torch.learn_one(MATMUL, FP32, 3.0)
    models = {"torch-cpu-x86": torch}

    def run(policy: SwitchyardPolicy, shared: bool, seeds: range) -> int:
        offered = [Candidate("torch-cpu-x86", FP32, 1, 0.0, device_wait_ms=0.0,
                             shares_core=shared),
                   Candidate("jax-cpu-x86", FP32, 1, 0.0, device_wait_ms=0.0, setup_ms=150.0,
                             setup_runs=1.0, setup_share=0.01, cold=True, shares_core=shared)]
        return sum(policy.decide(workload(), offered, models, None, rng(seed)).device_class
                   == "jax-cpu-x86" for seed in seeds)

    apart = SwitchyardPolicy()
    assert run(apart, False, range(300)) > 30
    assert apart.shared_routed_ms == apart.shared_explored_ms == 0.0  # nothing shared
    policy = SwitchyardPolicy()
    tries = run(policy, True, range(300))
    assert 1 <= tries < 10
    assert policy.shared_explored_ms <= (EXPLORE_SHARE * policy.shared_routed_ms
                                         + EXPLORE_ALLOWANCE_MS)
    # Spent: more known work routed there earns the next try.
    policy.shared_routed_ms += 2000.0 / EXPLORE_SHARE
    assert run(policy, True, range(300, 600)) >= 1


def test_the_exploration_budget_is_charged_what_the_tries_really_held() -> None:
    """A JAX try charged its expected 150 ms of setup held the shared core for 1.5 s (the
    live bf16 set: setups expected at 48-244 ms took 253-1,442): once its outcome says so
    (`settle`), the budget counts that, and no further try goes through until the known
    work routed there has earned it. Known work settles at its measured hold too."""
    from models.policy import EXPLORE_ALLOWANCE_MS, EXPLORE_SHARE, SwitchyardPolicy

    torch = CostModel.for_class("torch-cpu-x86")
    for _ in range(60):
        torch.learn_one(MATMUL, FP32, 3.0)
    models = {"torch-cpu-x86": torch}
    offered = [Candidate("torch-cpu-x86", FP32, 1, 0.0, device_wait_ms=0.0, shares_core=True),
               Candidate("jax-cpu-x86", FP32, 1, 0.0, device_wait_ms=0.0, setup_ms=150.0,
                         setup_runs=1.0, setup_share=0.01, cold=True, shares_core=True)]

    def tries(policy: SwitchyardPolicy, seeds: range, held_jax: float | None) -> list[str]:
        ids = []
        for seed in seeds:
            wid = f"w{seed}"
            chosen = policy.decide(workload(wid=wid), offered, models, None, rng(seed))
            if chosen.device_class == "jax-cpu-x86":
                ids.append(wid)
                if held_jax is not None:
                    policy.settle(wid, held_jax)
            elif held_jax is not None:
                policy.settle(wid, 3.0)
        return ids

    expected = SwitchyardPolicy()
    assert len(tries(expected, range(300), None)) >= 2
    measured = SwitchyardPolicy()
    first = tries(measured, range(300), 1500.0)
    assert len(first) == 1  # the one try spent the budget, as measured
    assert measured.shared_explored_ms > 1000.0
    assert measured.shared_explored_ms > (EXPLORE_SHARE * measured.shared_routed_ms
                                          + EXPLORE_ALLOWANCE_MS)
    # The routed total is the measured holds: 299 known workloads of 3 ms and the try.
    assert measured.shared_routed_ms == pytest.approx(299 * 3.0 + 1500.0)
    # Unknown or repeated ids change nothing.
    before = (measured.shared_routed_ms, measured.shared_explored_ms)
    measured.settle(first[0], 99.0)
    measured.settle("never-routed", 99.0)
    assert (measured.shared_routed_ms, measured.shared_explored_ms) == before
