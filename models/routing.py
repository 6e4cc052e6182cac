"""Routing one workload, as pure logic: what it is offered, what each offer is charged, what
the route says and what stays in flight. agents/decide.py reads the tables, calls these and
writes the results; nothing here touches Kafka, Faust or a clock.

- ``Snapshot``: what every decision of one batch reads (live classes, their backlog, learned
  models, setup costs); work routed within the batch is charged to it as it is routed, so a
  batch does not herd onto one class.
- ``offers``: the (class, variant) candidates, each charged the class's expected setup when it
  has probably not run this shape and variant yet (cold when that setup was never measured).
- ``choose``: the policy's decision over those candidates and the classes' learned models.
- ``charge``: the chosen class's share of the batch's backlog and its warm routes.
- ``route_fields``, ``inflight_entry``, ``decision_view``: the route record's fields, the
  in-flight table's entry, the dashboard's view of the decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.backlog import InflightEntry
from models.costmodel import CostModelLike
from models.decision import Candidate, Decision, Policy, remembered
from models.handling import Handling, handling_key
from models.history import HistoryModel
from models.ops import Variant
from models.probing import ProbeOption
from models.registry import ClassView, class_variants
from models.setup import WarmRoutes, expected_setup, setup_known, setup_share
from models.transfer import predict_transfer_ms, transfer_bytes
from models.workload import Workload


@dataclass
class Snapshot:
    """What every decision of one batch reads (see the module)."""

    classes: dict[str, ClassView]
    backlog_ms: dict[str, float]
    learned: dict[str, CostModelLike]
    setup: dict[str, Any]
    # Per class, the wait at its least-loaded device (models/dispatch.py), None where unknown;
    # refreshed before each decision from the backlog as routes are charged.
    device_wait_ms: dict[str, float | None] = field(default_factory=dict)
    # Each class's learned transfer sums (models/transfer.py), stored beside its model.
    transfer: dict[str, Any] = field(default_factory=dict)
    # Classes pinned to shared cores (models/dispatch.py::core_sharing of ``classes``).
    sharing: dict[str, dict[str, float]] = field(default_factory=dict)
    # Classes sharing a queue (models/dispatch.py::queue_sharing of ``classes``).
    queued_with: dict[str, dict[str, float]] = field(default_factory=dict)
    # Per shared-core class, its neighbours' queued work on those cores
    # (models/dispatch.py::colocated), refreshed with ``device_wait_ms``.
    core_busy_ms: dict[str, float] = field(default_factory=dict)
    # Per shared-core class, its neighbours' work left once its own queue drained
    # (models/dispatch.py::core_left), refreshed with ``device_wait_ms``.
    core_left: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # Each class's learned handling around the execution (models/handling.py); None: none.
    handling: Handling | None = None
    # What the decisions of this snapshot share per (op, precisions), computed at the first
    # workload of that shape: its offers' static terms (`offers`) and the policy's reading
    # of the cost models (models/policy.py). None: computed for every workload. Only for a
    # snapshot whose classes, models, setup and transfer views stay as they are while it is
    # used (the decide agent's batch); the backlog, waits and warm routes may change.
    memo: dict[Any, Any] | None = None


def warm_key(workload: Workload,
             candidate: Candidate | Decision | ProbeOption) -> tuple[str, str, str]:
    """The (shape, precision, mode) a class keeps warm once it has run it."""
    return shape_key(workload.op.signature(), candidate.variant)


def shape_key(signature: str, variant: Variant) -> tuple[str, str, str]:
    """`warm_key` from an op's signature (computed once per workload) and a variant."""
    return (signature, variant.precision, variant.mode)


def io_bytes(workload: Workload) -> int:
    """The bytes a workload's executor takes in and gives out: its inline tensors (or its op's
    inputs at their dtype) and its output."""
    return sum(transfer_bytes(workload.op, workload.inputs))


# One offer's terms that stay as they are within a snapshot: (class, its view, variant, the
# expected handling, the expected transfer, the (shape, precision, mode) it keeps warm, and the
# (setup ms, setup runs, cold) charged where that shape is not warm there).
_Offer = tuple[str, ClassView, Variant, float, float, tuple[str, str, str],
               tuple[float, float, bool]]


def shape_group(workload: Workload) -> tuple[Any, ...] | None:
    """The key under which a snapshot's ``memo`` keeps what every workload of the same op
    and precisions shares; None for a workload with inline inputs (its bytes are its own)."""
    if workload.inputs is not None:
        return None
    return (workload.op, workload.precisions)


def memo_io_bytes(workload: Workload, snapshot: Snapshot) -> int:
    """`io_bytes`, kept in the snapshot's ``memo`` per (op, precisions) where it has one."""
    group = shape_group(workload) if snapshot.memo is not None else None
    return remembered(snapshot.memo if group is not None else None, ("io bytes", group),
                      lambda: io_bytes(workload))


def offers(workload: Workload, snapshot: Snapshot, warm: WarmRoutes,
           nbytes: int | None = None) -> list[Candidate]:
    """Every (live class, variant) that can run ``workload``, with its class's backlog, the
    expected setup charged where the class has probably not run this shape and variant, the
    class's expected handling around the execution and, for a class behind a link, the
    expected transfer of the workload's bytes and its price. ``nbytes``: the workload's
    `io_bytes` where the caller has them (computed here when needed otherwise).

    With a snapshot ``memo``, what does not change within the snapshot (the variants each
    class offers, handling, transfer, the setup a cold shape would cost) is worked out once
    per (op, precisions); only the backlog, waits and warm routes are read per workload."""
    group = shape_group(workload) if snapshot.memo is not None else None
    static = remembered(snapshot.memo if group is not None else None, ("offers", group),
                        lambda: _static_offers(workload, snapshot, nbytes))
    backlog_ms, waits, busy = snapshot.backlog_ms, snapshot.device_wait_ms, snapshot.core_busy_ms
    core_left, is_warm, sharing = snapshot.core_left, warm.is_warm, snapshot.sharing
    share = setup_share(warm.routed(workload.op.signature()))
    out = []
    for device_class, view, variant, handling_ms, transfer_ms, key, cold_terms in static:
        setup_ms, setup_runs, cold = (0.0, 0.0, False) if is_warm(device_class, key) \
            else cold_terms
        # One construction per candidate (``dataclasses.replace`` of a bare one cost twice).
        out.append(Candidate(
            device_class=device_class, variant=variant, live_instances=view.live_instances,
            backlog_ms=float(backlog_ms.get(device_class, 0.0)), setup_ms=setup_ms,
            setup_runs=setup_runs, setup_share=share, cold=cold,
            device_wait_ms=waits.get(device_class), transfer_ms=transfer_ms,
            price_per_hour=view.price_per_hour, handling_ms=handling_ms,
            core_busy_ms=busy.get(device_class, 0.0), calibration=view.calibration,
            core_left=core_left.get(device_class, ()), shares_core=device_class in sharing))
    return out


def _static_offers(workload: Workload, snapshot: Snapshot, nbytes: int | None) -> list[_Offer]:
    """`offers`' terms that stay as they are within ``snapshot`` (see ``_Offer``)."""
    out: list[_Offer] = []
    kind = workload.op.kind
    signature = workload.op.signature()
    handling = snapshot.handling
    for device_class, view, variant in class_variants(workload, snapshot.classes):
        stored_transfer = snapshot.transfer.get(device_class)
        handling_ms = transfer_ms = 0.0
        if handling is not None:
            if nbytes is None:
                nbytes = io_bytes(workload)
            handling_ms = handling.ms(handling_key(device_class, variant.precision), nbytes)
        if view.link is not None or stored_transfer:
            if nbytes is None:
                nbytes = io_bytes(workload)
            transfer_ms = predict_transfer_ms(view.link, stored_transfer, nbytes)
        setup_ms, setup_runs, cold = 0.0, 0.0, False
        stored = snapshot.setup.get(device_class)
        if setup_known(stored, kind, variant.mode):
            setup_ms, setup_runs = expected_setup(stored, kind, variant.mode)
        else:  # what the class's executors measured when they started, if they did
            calibrated = dict(view.setup_excess).get(variant.mode)
            if calibrated is None:
                cold = True
            else:
                setup_ms, setup_runs = calibrated, 1.0
        out.append((device_class, view, variant, handling_ms, transfer_ms,
                    shape_key(signature, variant), (setup_ms, setup_runs, cold)))
    return out


def choose(policy: Policy, workload: Workload, candidates: list[Candidate],
           learned: Mapping[str, CostModelLike], history: HistoryModel | None,
           rng: np.random.Generator, memo: dict[Any, Any] | None = None) -> Decision:
    """The policy's decision, given the learned models of the offered classes only. With a
    snapshot's ``memo`` (`Snapshot.memo`), a policy that keeps what it reads of the models per
    (op, precisions) there (``memoizes``) reads them once per shape in the snapshot."""
    group = shape_group(workload) if memo is not None else None
    if group is not None and getattr(policy, "memoizes", False):
        # The models a memoizing policy reads are those of the candidates' classes.
        return policy.decide(workload, candidates, learned, history, rng,  # type: ignore[call-arg]
                             memo=memo, group=group)
    names = {c.device_class for c in candidates}
    return policy.decide(workload, candidates, {c: m for c, m in learned.items() if c in names},
                         history, rng)


def charge(snapshot: Snapshot, warm: WarmRoutes, workload: Workload, decision: Decision,
           dispatch_overhead_ms: float) -> None:
    """Add the routed work to its class's backlog in this batch's snapshot (execution, setup of
    a cold shape, the transfer over its link — the executor waits it out —, its handling, the
    executor's dispatch overhead) and mark the shape warm there."""
    warm.mark(decision.device_class, warm_key(workload, decision))
    snapshot.backlog_ms[decision.device_class] = (
        snapshot.backlog_ms.get(decision.device_class, 0.0) + float(decision.predicted_ms)
        + decision.setup_ms + decision.transfer_ms + decision.handling_ms
        + dispatch_overhead_ms)


def route_fields(workload: Workload, decision: Decision, policy_name: str, attempt: int,
                 decided_at_ms: int) -> dict[str, Any]:
    """The fields of the route record (app/records.py ``RouteRecord``). They share the
    workload's request and the decision's compared terms (neither is changed after: the route
    is serialised, kept in the in-flight entry and the ring of recent decisions as it is)."""
    return {
        "id": workload.id,
        "workload": workload.raw,
        "device_class": decision.device_class,
        "variant": decision.variant.to_dict(),
        "predicted_ms": float(decision.predicted_ms),
        "predicted_std_ms": float(decision.predicted_std_ms),
        "predicted_energy_j": decision.predicted_energy_j,
        "reason": decision.reason,
        "model_version": int(decision.model_version),
        "decided_at_ms": decided_at_ms,
        "policy": policy_name,
        "expected_wait_ms": float(decision.expected_wait_ms),
        "meets_deadline": bool(decision.meets_deadline),
        "attempt": attempt,
        "objective": {k: float(v) for k, v in workload.objective.items()},
        "predicted_transfer_ms": float(decision.transfer_ms),
        "predicted_cost": float(decision.cost),
        "energy_estimated": bool(decision.energy_estimated),
        "compared": list(decision.compared),
    }


def inflight_entry(route: Mapping[str, Any], setup_ms: float, partition: int,
                   offset: int | None, handling_ms: float = 0.0,
                   nbytes: int | None = None) -> InflightEntry:
    """The in-flight entry of a routed workload: where it went, what its class's backlog was
    charged (the execution plus the setup of a cold shape, the transfer over its link and
    the expected handling), the bytes it moves in and out (``nbytes``: what its handling is
    learned against), and where its record is (so that a redelivery of that very record is
    told from a duplicate submission)."""
    entry: InflightEntry = {
        "device_class": route["device_class"], "variant": route["variant"],
        "predicted_ms": route["predicted_ms"],
        "charged_ms": route["predicted_ms"] + setup_ms + handling_ms
        + float(route.get("predicted_transfer_ms") or 0.0),
        "decided_at_ms": route["decided_at_ms"],
        "attempt": route["attempt"], "partition": partition, "offset": offset,
        "workload": route["workload"],
    }
    if nbytes is not None:
        entry["io_bytes"] = nbytes
    return entry


def decision_view(route: Mapping[str, Any]) -> dict[str, Any]:
    """A decision as the recent-decisions ring keeps it (measured time joined when read), with
    the route's ``compared`` terms: the chosen option's and the runners-up's execution, wait,
    setup, handling, shared-core time and score, what an operator (or the next engineer) needs
    to see why a workload went where it did (a NumPy option charged 8.8 ms of setup on every
    new shape was found by reading them off the route topics)."""
    keys = ("device_class", "variant", "predicted_ms", "predicted_std_ms", "reason", "policy",
            "decided_at_ms", "attempt", "meets_deadline", "predicted_transfer_ms",
            "predicted_cost", "predicted_energy_j", "compared")
    return {"id": route["id"], **{k: route.get(k) for k in keys}, "measured_ms": None,
            "status": None}
