"""probe: informative executions on idle classes, when the operator allows it.

Off unless ``Settings.idle_probing`` (``SWITCHYARD_IDLE_PROBING=1``). Every
``idle_probe_interval_s`` the worker looks for live classes that are idle: nothing routed there
by this worker for ``idle_probe_after_s``, nothing of this worker's in flight there, and no
queued work reported by the class's devices. Each idle class is handed at most one probe: a
shape this worker routed lately (``state.shapes``), in the variant its cost model is least sure
of (models/probing.py), predicted to take at most ``idle_probe_max_ms`` with its setup.

A probe is a route with ``probe: true`` and reason ``probe``, under an id of its own
(``probe-…``). The executor runs it like any route and publishes its metric — the learn and
window stages take it like any other — but no outcome: nobody submitted it, so the complete
stage never sees it and no result is published. It is not charged to the backlog (nothing would
release the charge); the ceiling on its predicted time bounds what real work can wait behind
it. With several workers each probes the classes idle from where it stands.
"""

from __future__ import annotations

import logging
import time
import uuid

from agents import decide, state
from app import observability
from app.main import app, settings
from app.records import RouteRecord
from app.streaming import now_ms
from models.decision import PriorModels
from models.dispatch import route_partition
from models.probing import PROBE_REASON, Probe, ProbeOption, pick_probe, probe_request
from models.registry import ClassView
from models.routing import Snapshot, offers, warm_key

logger = logging.getLogger(__name__)

priors = PriorModels()
# Per class, when its last probe was sent (time.monotonic()).
_probed_at: dict[str, float] = {}


def idle_classes(snapshot: Snapshot, now: float) -> list[str]:
    """The live classes idle long enough for a probe (see the module docstring)."""
    idle = []
    for name, view in snapshot.classes.items():
        if now - state.last_routed.get(name, float("-inf")) < settings.idle_probe_after_s:
            continue
        if now - _probed_at.get(name, float("-inf")) < settings.idle_probe_interval_s:
            continue
        if view.queue_depth > 0 or state.backlog.holds_work(name):
            continue
        idle.append(name)
    return idle


def options_for(device_class: str, snapshot: Snapshot) -> list[ProbeOption]:
    """Every recent shape in every variant ``device_class`` offers for it."""
    only = Snapshot(classes={device_class: snapshot.classes[device_class]},
                    backlog_ms={device_class: 0.0}, learned=snapshot.learned,
                    setup=snapshot.setup, transfer=snapshot.transfer)
    out = []
    for workload in state.shapes.workloads():
        for candidate in offers(workload, only, decide.warm_routes):
            out.append(ProbeOption(
                workload, device_class, candidate.variant, candidate.setup_ms,
                setup_runs=candidate.setup_runs,
                seen=decide.warm_routes.is_warm(device_class, warm_key(workload, candidate)),
                calibration=candidate.calibration))
    return out


async def send_probe(probe: Probe, view: ClassView) -> None:
    """Hand one probe's route to the producer and mark its shape warm on the class."""
    option = probe.option
    probe_id = f"probe-{uuid.uuid4().hex[:16]}"
    record = RouteRecord(
        id=probe_id, workload=probe_request(option.workload, probe_id),
        device_class=option.device_class, variant=option.variant.to_dict(),
        predicted_ms=probe.predicted_ms, predicted_std_ms=probe.predicted_std_ms,
        reason=PROBE_REASON, model_version=probe.model_version, decided_at_ms=now_ms(),
        policy=decide.policy.name, probe=True)
    topic = await decide.route_topic(option.device_class)
    lane = route_partition(state.backlog, view, settings.dispatch_overhead_ms)
    await topic.send(key=probe_id, value=record.dumps(), partition=lane)
    decide.warm_routes.mark(option.device_class, warm_key(option.workload, option))
    observability.inc("switchyard_probes_total", device_class=option.device_class)
    logger.info("probe %s: %s %s %s on idle %s (weight std %.3f, predicted %.2f ms)",
                probe_id, option.workload.op.kind, option.workload.op.signature(),
                option.variant, option.device_class, probe.weight_std, probe.predicted_ms)


async def probe_idle_classes() -> int:
    """Send at most one probe to each idle class; the number sent."""
    if not len(state.shapes):
        return 0
    snapshot = decide.snapshot_now()
    now = time.monotonic()
    sent = 0
    for device_class in idle_classes(snapshot, now):
        probe = pick_probe(options_for(device_class, snapshot), snapshot.learned, priors,
                           settings.idle_probe_max_ms, settings.idle_probe_min_std)
        if probe is None:
            continue
        _probed_at[device_class] = now
        await send_probe(probe, snapshot.classes[device_class])
        sent += 1
    return sent


if settings.idle_probing:

    @app.timer(interval=settings.idle_probe_interval_s)
    async def probe_idle() -> None:
        """Probe the idle classes (see the module docstring)."""
        await probe_idle_classes()
