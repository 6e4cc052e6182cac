"""Routing one workload as pure logic (models/routing.py): offers, charges, records."""

from __future__ import annotations

import numpy as np
import pytest

from models.costmodel import CostModel
from models.handling import Handling
from models.ops import Variant, parse_op
from models.policy import make_policy
from models.registry import ClassView
from models.routing import (
    Snapshot,
    charge,
    choose,
    decision_view,
    inflight_entry,
    io_bytes,
    offers,
    route_fields,
    warm_key,
)
from models.setup import WarmRoutes
from models.workload import Workload

OP = parse_op({"kind": "matmul", "m": 256, "k": 256, "n": 256})


def workload(precisions: tuple[str, ...] = ("fp32",)) -> Workload:
    return Workload(id="w1", op=OP, precisions=precisions, deadline_ms=None,
                    objective={"latency": 1.0, "energy": 0.0},
                    raw={"id": "w1", "op": OP.to_dict(), "precisions": list(precisions)})


def snapshot() -> Snapshot:
    caps = frozenset({("matmul", "fp32", "eager"), ("matmul", "fp32", "compiled"),
                      ("matmul", "bf16", "eager")})
    classes = {"jax-cpu-x": ClassView("jax-cpu-x", 1, caps),
               "numpy-cpu-x": ClassView("numpy-cpu-x", 2, frozenset({("matmul", "fp32",
                                                                        "eager")}))}
    return Snapshot(classes=classes, backlog_ms={"jax-cpu-x": 5.0}, learned={},
                    setup={"jax-cpu-x": {"matmul/compiled": {"ms": 150.0, "n": 3}}})


def test_offers_charge_a_cold_shape_its_measured_setup_and_mark_unknown_setups_cold() -> None:
    warm = WarmRoutes()
    got = {(c.device_class, c.variant.mode): c for c in offers(workload(), snapshot(), warm)}
    assert set(got) == {("jax-cpu-x", "eager"), ("jax-cpu-x", "compiled"),
                        ("numpy-cpu-x", "eager")}  # bf16 is not allowed by the request
    compiled = got[("jax-cpu-x", "compiled")]
    assert compiled.setup_ms == 150.0 and not compiled.cold  # measured before
    assert got[("jax-cpu-x", "eager")].cold and got[("jax-cpu-x", "eager")].setup_ms == 0.0
    assert compiled.backlog_ms == 5.0 and got[("numpy-cpu-x", "eager")].live_instances == 2
    warm.mark("jax-cpu-x", warm_key(workload(), compiled))
    again = {(c.device_class, c.variant.mode): c for c in offers(workload(), snapshot(), warm)}
    assert again[("jax-cpu-x", "compiled")].setup_ms == 0.0  # it has run this shape
    assert not again[("jax-cpu-x", "compiled")].cold


def test_a_routed_workload_is_charged_to_its_class_for_the_rest_of_the_batch() -> None:
    snap, warm, w = snapshot(), WarmRoutes(), workload()
    candidates = offers(w, snap, warm)
    decision = choose(make_policy("round_robin"), w, candidates, snap.learned, None,
                      np.random.default_rng(0))
    before = snap.backlog_ms.get(decision.device_class, 0.0)
    charge(snap, warm, w, decision, dispatch_overhead_ms=2.0)
    assert snap.backlog_ms[decision.device_class] == pytest.approx(
        before + decision.predicted_ms + decision.setup_ms + 2.0)
    assert warm.is_warm(decision.device_class, warm_key(w, decision))


def test_choose_shows_the_policy_only_the_offered_classes_models() -> None:
    seen: list[set[str]] = []

    class Spy:
        name = "spy"

        def decide(self, workload, candidates, models, history, rng):
            seen.append(set(models))
            return make_policy("round_robin").decide(workload, candidates, models, history,
                                                     rng)

    snap = snapshot()
    learned = {c: CostModel.for_class(c) for c in ("jax-cpu-x", "sim-h100")}
    choose(Spy(), workload(), offers(workload(), snap, WarmRoutes()), learned, None,
           np.random.default_rng(0))
    assert seen == [{"jax-cpu-x"}]


def test_offers_charge_each_class_its_learned_handling_and_the_entry_keeps_it() -> None:
    """What an executor spends around the execution (inputs made, output checksummed) is part
    of each offer, of the batch's backlog and of the in-flight charge, against which the
    class's pace is measured; the entry keeps the bytes it is learned against."""
    snap, w = snapshot(), workload()
    snap.handling = Handling()
    nbytes = io_bytes(w)
    assert nbytes == 3 * 256 * 256 * 4  # two inputs and the output, fp32
    for _ in range(20):
        snap.handling.observe("jax-cpu-x", nbytes, 30.0)
        snap.handling.observe("numpy-cpu-x", nbytes, 3.0)
    by_class = {c.device_class: c.handling_ms for c in offers(w, snap, WarmRoutes())}
    assert by_class["jax-cpu-x"] == pytest.approx(30.0, rel=0.05)
    assert by_class["numpy-cpu-x"] == pytest.approx(3.0, rel=0.05)
    decision = choose(make_policy("switchyard"), w, offers(w, snap, WarmRoutes()),
                      snap.learned, None, np.random.default_rng(0))
    assert decision.device_class == "numpy-cpu-x"  # equal priors: the cheaper handling
    assert decision.handling_ms == pytest.approx(3.0, rel=0.05)
    assert decision.compared[0]["handling_ms"] == decision.handling_ms
    before = snap.backlog_ms.get("numpy-cpu-x", 0.0)
    charge(snap, WarmRoutes(), w, decision, dispatch_overhead_ms=0.0)
    assert snap.backlog_ms["numpy-cpu-x"] - before == pytest.approx(
        decision.predicted_ms + decision.setup_ms + decision.handling_ms)
    route = route_fields(w, decision, "switchyard", attempt=1, decided_at_ms=1)
    entry = inflight_entry(route, 0.0, 0, 5, handling_ms=decision.handling_ms, nbytes=nbytes)
    assert entry["charged_ms"] == pytest.approx(decision.predicted_ms + decision.handling_ms)
    assert entry["io_bytes"] == nbytes


def test_route_fields_inflight_entry_and_decision_view_agree() -> None:
    snap, w = snapshot(), workload()
    decision = choose(make_policy("round_robin"), w, offers(w, snap, WarmRoutes()),
                      snap.learned, None, np.random.default_rng(0))
    route = route_fields(w, decision, "round_robin", attempt=2, decided_at_ms=1234)
    assert route["id"] == "w1" and route["workload"] == w.raw and route["attempt"] == 2
    entry = inflight_entry(route, setup_ms=40.0, partition=3, offset=17)
    assert entry["charged_ms"] == pytest.approx(route["predicted_ms"] + 40.0)
    assert (entry["partition"], entry["offset"], entry["device_class"]) == (
        3, 17, decision.device_class)
    view = decision_view(route)
    assert view["policy"] == "round_robin" and view["measured_ms"] is None
    assert view["decided_at_ms"] == 1234 and view["variant"] == decision.variant.to_dict()
    assert view["compared"] == route["compared"] == []  # a baseline weighs no terms
    # switchyard's: why it went there, the chosen option's terms first, then the runners-up
    chosen = choose(make_policy("switchyard"), w, offers(w, snap, WarmRoutes()), snap.learned,
                    None, np.random.default_rng(0))
    view = decision_view(route_fields(w, chosen, "switchyard", attempt=1, decided_at_ms=1))
    assert view["compared"] and view["compared"][0]["device_class"] == chosen.device_class
    assert {"exec_ms", "wait_ms", "setup_ms", "score"} <= set(view["compared"][0])


def test_a_cold_shape_of_an_unmeasured_mode_is_charged_what_the_executors_calibrated() -> None:
    """Before any workload measured a mode's setup, the class's executors' start-up
    measurement (heartbeats' ``setup_excess_ms``) is the charge: eager JAX's first call of a
    shape cost 264-666 ms on the live mix where nothing was charged, and the router sent its
    first shapes there. A measured setup still comes first; a class without either stays
    cold (unknown)."""
    import dataclasses

    base = snapshot()
    classes = dict(base.classes)
    classes["jax-cpu-x"] = dataclasses.replace(
        classes["jax-cpu-x"], setup_excess=(("compiled", 90.0), ("eager", 211.0)))
    calibrated = dataclasses.replace(base, classes=classes)
    got = {(c.device_class, c.variant.mode): c
           for c in offers(workload(), calibrated, WarmRoutes())}
    eager = got[("jax-cpu-x", "eager")]
    assert (eager.setup_ms, eager.setup_runs, eager.cold) == (211.0, 1.0, False)
    compiled = got[("jax-cpu-x", "compiled")]
    assert compiled.setup_ms == 150.0 and compiled.setup_runs == 0.0  # measured: it wins
    assert got[("numpy-cpu-x", "eager")].cold  # nothing calibrated, nothing measured


def _batch_decisions(memo: dict | None, policy_name: str = "switchyard") -> list[tuple]:
    """A batch of workloads of two shapes decided in order on one snapshot (charged as they
    are routed, warm routes marked), with or without the snapshot's memo."""
    ops = [OP, parse_op({"kind": "matmul", "m": 64, "k": 512, "n": 128})]
    learned = CostModel("numpy-cpu-x")
    learned.learn_many([(ops[0], Variant("fp32", "eager"), 3.0, None)] * 20)
    snap, warm = snapshot(), WarmRoutes()
    snap.learned = {"numpy-cpu-x": learned}  # jax-cpu-x stays on its prior (a cold class)
    # Measured setups: each shape's first route to a class is charged one, later ones none.
    snap.setup = {"jax-cpu-x": {**snap.setup["jax-cpu-x"], "matmul/eager": {"ms": 4.0, "n": 3}},
                  "numpy-cpu-x": {"matmul/eager": {"ms": 1.0, "n": 3}}}
    snap.memo = memo
    policy, rng, out = make_policy(policy_name), np.random.default_rng(7), []
    for i in range(24):
        op = ops[i % 3 == 0]
        w = Workload(id=f"w{i}", op=op, precisions=("fp32", "bf16"), deadline_ms=None,
                     objective={"latency": 1.0, "energy": 0.0}, raw={"id": f"w{i}"})
        candidates = offers(w, snap, warm)
        decision = choose(policy, w, candidates, snap.learned, None, rng, snap.memo)
        charge(snap, warm, w, decision, dispatch_overhead_ms=2.0)
        out.append((decision.device_class, decision.variant, decision.predicted_ms,
                    sum(c.setup_ms for c in candidates), decision.score, decision.reason,
                    decision.compared, candidates))
    return out


@pytest.mark.parametrize("policy_name", ["switchyard", "jsq"])
def test_a_snapshot_memo_changes_no_decision(policy_name: str) -> None:
    """The memo keeps per (op, precisions) what stays as it is within a snapshot; the
    backlog, the warm routes (a cold shape's setup, charged until it is routed) and the draws
    still move per workload, so every decision is the one made without it, to the bit."""
    memo: dict = {}
    with_memo = _batch_decisions(memo, policy_name)
    assert with_memo == _batch_decisions(None, policy_name)
    assert len({d[0] for d in with_memo}) == 2  # both classes were routed to
    assert with_memo[0][3] > with_memo[-1][3]  # setups offered until the shape was routed
    kinds = {key[0] for key in memo}
    assert "offers" in kinds and (policy_name != "switchyard" or "model terms" in kinds)
    assert len(memo) == len(kinds) * 2  # one entry per kind per shape


def test_a_snapshot_memo_reads_each_model_once_per_shape() -> None:
    """With the memo, the policy asks a class's model about a shape once per snapshot."""
    asked: list[str] = []

    class Counting(CostModel):
        def predict_one(self, op, variant):  # type: ignore[no-untyped-def]
            asked.append(op.signature())
            return super().predict_one(op, variant)

    snap, warm, w = snapshot(), WarmRoutes(), workload()
    snap.learned, snap.memo = {"numpy-cpu-x": Counting("numpy-cpu-x")}, {}
    policy, rng = make_policy("switchyard"), np.random.default_rng(0)
    for _ in range(5):
        charge(snap, warm, w, choose(policy, w, offers(w, snap, warm), snap.learned, None, rng,
                                     snap.memo), dispatch_overhead_ms=2.0)
    assert len(asked) == 1
    snap.memo = None
    choose(policy, w, offers(w, snap, warm), snap.learned, None, rng, snap.memo)
    assert len(asked) == 2


def test_offers_charge_each_precision_its_own_handling() -> None:
    """jax-cpu-x's bf16 workloads convert their inputs and output (20 ms here), its fp32 ones
    do not (3 ms): each offer carries its own precision's handling."""
    from models.handling import handling_key

    snap = snapshot()
    snap.handling = Handling()
    w = workload(("fp32", "bf16"))
    nbytes = io_bytes(w)
    for _ in range(20):
        snap.handling.observe(handling_key("jax-cpu-x", "fp32"), nbytes, 3.0)
        snap.handling.observe(handling_key("jax-cpu-x", "bf16"), nbytes, 20.0)
    got = {(c.device_class, c.variant.precision, c.variant.mode): c.handling_ms
           for c in offers(w, snap, WarmRoutes())}
    assert got[("jax-cpu-x", "fp32", "eager")] == pytest.approx(3.0, rel=0.05)
    assert got[("jax-cpu-x", "fp32", "compiled")] == pytest.approx(3.0, rel=0.05)
    assert got[("jax-cpu-x", "bf16", "eager")] == pytest.approx(20.0, rel=0.05)
