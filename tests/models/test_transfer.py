"""Remote classes as pure logic: the bytes a workload moves, a declared link's time, the
per-class transfer fit learned from measurements, and how the policy weighs transfer, cost,
energy, a deadline and a cost ceiling (models/transfer.py, models/policy.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.costmodel import CostModel
from models.decision import Candidate, weighted_scores
from models.devices import DEVICE_CATALOG, modelled_energy_j
from models.ops import Variant, parse_op
from models.policy import OverBudget, make_policy
from models.registry import ClassView, live_classes
from models.routing import Snapshot, charge, inflight_entry, offers, route_fields
from models.setup import WarmRoutes
from models.transfer import (
    MB,
    Link,
    fit_transfer,
    op_io_bytes,
    parse_link,
    predict_transfer_ms,
    transfer_bytes,
    transfer_rows,
    update_transfer,
)
from models.workload import Workload, parse_workload

FP32 = Variant("fp32")
BIG = parse_op({"kind": "matmul", "m": 1024, "k": 1024, "n": 1024})
SMALL = parse_op({"kind": "matmul", "m": 32, "k": 32, "n": 32})


def workload(op=BIG, objective=None, deadline_ms=None, max_cost=None) -> Workload:
    return Workload(id="w", op=op, deadline_ms=deadline_ms, max_cost=max_cost,
                    objective=objective or {"latency": 1.0, "energy": 0.0},
                    raw={"id": "w", "op": op.to_dict()})


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


# -- bytes and the declared link -------------------------------------------------------------
def test_transfer_bytes_are_the_inputs_up_and_the_output_down() -> None:
    assert op_io_bytes(BIG) == (2 * 1024 * 1024 * 4, 1024 * 1024 * 4)
    half = parse_op({"kind": "matmul", "m": 4, "k": 8, "n": 2, "dtype": "float16"})
    assert op_io_bytes(half) == ((32 + 16) * 2, 8 * 2)
    inline = {"a": np.ones((4, 8), np.float16), "b": np.ones((8, 2), np.float16)}
    assert transfer_bytes(half, inline) == (96, 16)
    assert transfer_bytes(half, None) == (96, 16)  # no inline inputs: what a client would ship


def test_a_declared_link_is_a_round_trip_plus_bytes_at_its_bandwidth() -> None:
    link = Link(rtt_ms=20.0, bandwidth_mbit_s=80.0)  # 10 MB/s = 10,000 bytes per ms
    assert link.transfer_ms(1_000_000) == pytest.approx(20.0 + 100.0)
    assert link.transfer_ms(500_000, 500_000) == pytest.approx(120.0)
    assert link.ms_per_mb() == pytest.approx(100.0)


@pytest.mark.parametrize(("value", "reason"), [
    ({"rtt_ms": 5, "bandwidth_mbit_s": -1}, "bandwidth_mbit_s must be"),
    ({"rtt_ms": 5, "bandwidth_mbit_s": 0}, "bandwidth_mbit_s must be"),
    ({"rtt_ms": -5, "bandwidth_mbit_s": 1}, "rtt_ms must be"),
    ({"rtt_ms": float("nan"), "bandwidth_mbit_s": 1}, "rtt_ms must be"),
    ({"rtt_ms": True, "bandwidth_mbit_s": 1}, "rtt_ms must be"),
    ({"rtt_ms": 5}, "link must be"),
    ({"rtt_ms": 5, "bandwidth_mbit_s": 1, "jitter": 2}, "link must be"),
    ("fast", "link must be"),
])
def test_bad_links_are_refused_with_a_reason(value: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_link(value)


def test_no_link_and_no_measurement_means_a_local_class() -> None:
    assert parse_link(None) is None
    assert fit_transfer(None, None) is None
    assert predict_transfer_ms(None, None, 1e9) == 0.0


# -- learning the transfer per class ---------------------------------------------------------
def test_a_declared_link_is_the_prediction_until_measurements_arrive() -> None:
    link = Link(10.0, 800.0)  # 100 MB/s: 10 ms per MB
    assert predict_transfer_ms(link, None, 5 * MB) == pytest.approx(10.0 + 50.0)


def test_the_fit_follows_what_is_measured_not_what_was_declared() -> None:
    declared = Link(10.0, 800.0)  # 10 ms + 10 ms/MB declared
    rows = [(mb * MB, 30.0 + 40.0 * mb) for mb in (0.5, 1, 2, 4, 8) * 6]  # really 4x slower
    stored = update_transfer(None, rows)
    fit = fit_transfer(declared, stored)
    assert fit is not None and fit.rows == 30
    assert fit.a_ms == pytest.approx(30.0, abs=1.0)
    assert fit.b_ms_per_mb == pytest.approx(40.0, rel=0.02)
    assert predict_transfer_ms(declared, stored, 3 * MB) == pytest.approx(150.0, rel=0.02)


def test_the_fit_forgets_a_link_that_drifted() -> None:
    stored = update_transfer(None, [(mb * MB, 5.0 + 10.0 * mb) for mb in (1, 2, 4) * 30])
    before = predict_transfer_ms(Link(5.0, 800.0), stored, 4 * MB)
    stored = update_transfer(stored, [(mb * MB, 5.0 + 100.0 * mb) for mb in (1, 2, 4) * 40])
    after = predict_transfer_ms(Link(5.0, 800.0), stored, 4 * MB)
    assert before == pytest.approx(45.0, rel=0.05)
    assert after == pytest.approx(405.0, rel=0.1)  # 10x slower: followed within 120 rows


def test_a_class_that_measured_without_declaring_is_fitted_from_a_vague_prior() -> None:
    stored = update_transfer(None, [(mb * MB, 2.0 + 3.0 * mb) for mb in (1, 2, 3, 4) * 5])
    assert predict_transfer_ms(None, stored, 10 * MB) == pytest.approx(32.0, rel=0.05)


def test_update_skips_rows_that_are_not_measurements_and_round_trips_json() -> None:
    import json

    stored = update_transfer(None, [(MB, 5.0), (float("nan"), 1.0), (MB, -1.0)])
    assert stored["n"] == 1 and stored["last_ms"] == 5.0
    assert json.loads(json.dumps(stored)) == stored


def test_transfer_rows_take_successful_measured_executions_only() -> None:
    from types import SimpleNamespace as Row

    rows = [Row(device_class="sim-h100", status="ok", transfer_ms=12.0, transfer_bytes=1000),
            Row(device_class="sim-h100", status="error", transfer_ms=3.0, transfer_bytes=10),
            Row(device_class="torch-cpu-x86", status="ok", transfer_ms=None,
                transfer_bytes=None),
            Row(device_class="sim-h100", status="ok", transfer_ms=1.0, transfer_bytes=True)]
    assert transfer_rows(rows) == {"sim-h100": [(1000.0, 12.0)]}


# -- registry and routing ----------------------------------------------------------------------
def test_a_class_takes_the_slowest_link_and_the_highest_price_its_devices_declare() -> None:
    base = {"device_class": "sim-h100", "last_seen_ms": 1000, "capabilities": []}
    devices = [{**base, "device_id": "a", "link": {"rtt_ms": 10, "bandwidth_mbit_s": 1000},
                "price_per_hour": 2.0},
               {**base, "device_id": "b", "link": {"rtt_ms": 30, "bandwidth_mbit_s": 5000},
                "price_per_hour": 3.0},
               {"device_class": "torch-cpu-x86", "device_id": "c", "last_seen_ms": 1000}]
    views = live_classes(devices, 1500, 5.0)
    assert views["sim-h100"].link == Link(30, 1000) and views["sim-h100"].price_per_hour == 3.0
    assert views["torch-cpu-x86"].link is None and views["torch-cpu-x86"].price_per_hour == 0.0


LINK = Link(20.0, 800.0)


def snapshot(link: Link | None = LINK, price: float = 4.0) -> Snapshot:
    caps = frozenset({("matmul", "fp32", "eager")})
    return Snapshot(classes={"torch-cpu-x86": ClassView("torch-cpu-x86", 1, caps),
                             "sim-h100": ClassView("sim-h100", 1, caps, link=link,
                                                   price_per_hour=price)},
                    backlog_ms={}, learned={}, setup={})


def test_offers_charge_a_remote_class_its_transfer_and_price() -> None:
    got = {c.device_class: c for c in offers(workload(), snapshot(), WarmRoutes())}
    nbytes = 3 * 1024 * 1024 * 4
    assert got["sim-h100"].transfer_ms == pytest.approx(20.0 + nbytes / 1e5)
    assert got["sim-h100"].price_per_hour == 4.0
    assert got["torch-cpu-x86"].transfer_ms == 0.0 and got["torch-cpu-x86"].price_per_hour == 0


def test_the_backlog_and_the_in_flight_charge_include_the_transfer() -> None:
    snap, w = snapshot(), workload()
    offered = offers(w, snap, WarmRoutes())
    policy = make_policy("static", device_class="sim-h100")
    d = policy.decide(w, offered, {}, None, rng())
    remote = next(c for c in offered if c.device_class == "sim-h100")
    best = make_policy("switchyard").decide(
        workload(deadline_ms=1e9), [remote], {}, None, rng())
    assert best.transfer_ms == pytest.approx(remote.transfer_ms)
    charge(snap, WarmRoutes(), w, best, dispatch_overhead_ms=0.0)
    assert snap.backlog_ms["sim-h100"] == pytest.approx(best.predicted_ms + best.transfer_ms)
    route = route_fields(w, best, "switchyard", 1, 5)
    entry = inflight_entry(route, 0.0, 0, 1)
    assert entry["charged_ms"] == pytest.approx(best.predicted_ms + best.transfer_ms)
    assert route["predicted_transfer_ms"] == best.transfer_ms and d.device_class == "sim-h100"


# -- the policy: transfer, cost, energy, deadline and ceiling -------------------------------
def remote_and_local(transfer_ms: float, price: float = 4.0) -> list[Candidate]:
    return [Candidate("sim-jetson-orin", FP32),
            Candidate("sim-h100", FP32, transfer_ms=transfer_ms, price_per_hour=price)]


def test_latency_offloads_a_large_op_only_while_the_link_is_fast() -> None:
    policy = make_policy("switchyard")
    orin = CostModel.for_class("sim-jetson-orin").predict_one(BIG, FP32).mean_ms
    fast = policy.decide(workload(), remote_and_local(orin / 4), {}, None, rng())
    slow = policy.decide(workload(), remote_and_local(orin * 4), {}, None, rng())
    assert fast.device_class == "sim-h100" and fast.transfer_ms == pytest.approx(orin / 4)
    assert slow.device_class == "sim-jetson-orin" and slow.transfer_ms == 0.0
    # The route says why: the chosen candidate's terms first, then the other's.
    assert [c["device_class"] for c in slow.compared] == ["sim-jetson-orin", "sim-h100"]
    assert slow.compared[1]["transfer_ms"] == pytest.approx(orin * 4)
    assert slow.compared[0]["score"] <= slow.compared[1]["score"]


def test_cost_objective_keeps_work_on_free_devices_and_breaks_ties_by_latency() -> None:
    policy = make_policy("switchyard")
    offered = [Candidate("sim-cpu-core", FP32), Candidate("sim-jetson-orin", FP32),
               Candidate("sim-h100", FP32, transfer_ms=0.1, price_per_hour=4.0)]
    d = policy.decide(workload(objective={"latency": 0, "energy": 0, "cost": 1}), offered, {},
                      None, rng())
    assert d.device_class == "sim-jetson-orin" and d.cost == 0.0  # free, and the faster one
    latency = policy.decide(workload(), offered, {}, None, rng())
    assert latency.device_class == "sim-h100"
    h100 = next(c for c in latency.compared if c["device_class"] == "sim-h100")
    assert h100["cost"] == pytest.approx(4.0 * (h100["exec_ms"] + 0.1) / 3.6e6)


def test_cost_ceiling_drops_expensive_classes_and_refuses_when_none_is_left() -> None:
    policy = make_policy("switchyard")
    offered = remote_and_local(0.1, price=4.0)
    within = policy.decide(workload(max_cost=0.0), offered, {}, None, rng())
    assert within.device_class == "sim-jetson-orin"
    with pytest.raises(OverBudget, match="max_cost 0"):
        policy.decide(workload(max_cost=0.0), [offered[1]], {}, None, rng())
    rich = policy.decide(workload(max_cost=1.0), offered, {}, None, rng())
    assert rich.device_class == "sim-h100" and rich.cost <= 1.0


def test_a_deadline_counts_the_transfer() -> None:
    policy = make_policy("switchyard")
    orin = CostModel.for_class("sim-jetson-orin").predict_one(BIG, FP32).mean_ms
    offered = remote_and_local(orin / 4)
    # Energy prefers the H100 here (its prior: 700 W for a few µs)...
    free = policy.decide(workload(objective={"latency": 0, "energy": 1}), offered, {}, None,
                         rng())
    assert free.device_class == "sim-h100" and free.energy_estimated
    # ...unless its transfer would miss the deadline that the local device makes.
    tight = policy.decide(workload(objective={"latency": 0, "energy": 1},
                                   deadline_ms=orin * 1.1),
                          remote_and_local(orin * 2), {}, None, rng())
    assert tight.device_class == "sim-jetson-orin" and tight.meets_deadline


def test_mixed_scores_weigh_cost_relative_to_the_cheapest_priced_candidate() -> None:
    latency = np.array([10.0, 5.0, 20.0])
    cost = np.array([0.0, 2e-6, 1e-6])
    pure = weighted_scores(latency, None, {"latency": 0, "energy": 0, "cost": 1}, cost)
    assert list(pure) == list(cost)
    mixed = weighted_scores(latency, None, {"latency": 0.5, "energy": 0, "cost": 0.5}, cost)
    assert mixed == pytest.approx([0.5 * 2 / 1, (0.5 * 1 + 0.5 * 2) / 1, (0.5 * 4 + 0.5 * 1)])
    # Only unpriced candidates: the cost term is 0 for all, latency decides.
    free = weighted_scores(latency, None, {"latency": 0.5, "cost": 0.5}, np.zeros(3))
    assert int(np.argmin(free)) == 1


def test_requests_parse_cost_objectives_and_ceilings() -> None:
    w = parse_workload({"id": "w", "op": SMALL.to_dict(), "objective": "cost", "max_cost": 0})
    assert w.objective == {"latency": 0.0, "energy": 0.0, "cost": 1.0} and w.max_cost == 0.0


def test_modelled_energy_is_idle_power_for_the_launch_and_tdp_for_the_rest() -> None:
    h100 = DEVICE_CATALOG["h100"]
    assert modelled_energy_j(h100, 1.0) == pytest.approx(
        70.0 * 8e-6 + 700.0 * (1e-3 - 8e-6))
    assert modelled_energy_j(h100, 0.004) == pytest.approx(70.0 * 4e-6)
    assert modelled_energy_j(h100, -1.0) == 0.0
    assert math.isfinite(modelled_energy_j(DEVICE_CATALOG["cpu-core"], 1e6))
