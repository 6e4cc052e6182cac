"""Device liveness and routing candidates, from the registry's device records (pure logic).

A device record is the executor's last heartbeat (see ``app.records.HeartbeatRecord``) plus
``last_seen_ms``, the time the registry received it.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from models.decision import Candidate
from models.ops import MODES, PRECISIONS, Variant
from models.priors import is_rate, kernel_key, reference_kind
from models.transfer import Link, parse_link, parse_price
from models.workload import Workload


@dataclass(frozen=True)
class ClassView:
    """What the live devices of one class offer right now."""

    device_class: str
    live_instances: int
    capabilities: frozenset[tuple[str, str, str]] = field(default_factory=frozenset)
    queue_depth: int = 0
    simulated: bool = False
    device_ids: tuple[str, ...] = ()
    # (device id, the partitions of the class's route topic it consumes), from heartbeats.
    route_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # The link the class sits behind (the slowest its live devices declare: longest round
    # trip, narrowest bandwidth) and its price per device-hour (the highest declared; 0 when
    # none is); models/transfer.py.
    link: Link | None = None
    price_per_hour: float = 0.0
    # (host, core) of every pinned live device of the class (heartbeats' ``host`` and
    # ``cpus``): classes whose cores overlap share those cores' time (models/dispatch.py).
    cores: frozenset[tuple[str, int]] = frozenset()
    # (host, group) of every live device of the class that shares its process's compute
    # thread with others (heartbeats' ``queue_group``): classes with a group in common run
    # their work as one queue, in arrival order (models/dispatch.py::queue_sharing).
    queues: frozenset[tuple[str, str]] = frozenset()
    # What its live devices measured when they started, the median over them
    # (runtimes/calibrate.py): (precision, matmul GFLOP/s) from heartbeats' ``calibration``,
    # and (models/priors.py::kernel_key, ms of that kind's reference op) from ``kernel_ms``;
    # () where none reported. models/priors.py::prior_for_class reads both.
    calibration: tuple[tuple[str, float], ...] = ()
    # Per mode, the setup of a shape new to the class beyond one execution, as its live
    # devices measured it when they started (heartbeats' ``setup_excess_ms``, the median over
    # them): the setup charge of a cold shape until workloads measured it (models/setup.py).
    setup_excess: tuple[tuple[str, float], ...] = ()


def device_is_live(device: Mapping[str, Any], now_ms: float, timeout_s: float) -> bool:
    """A device is live while its last heartbeat is younger than ``timeout_s`` and it has not
    announced that it is stopping."""
    if device.get("state") == "stopping":
        return False
    last_seen = device.get("last_seen_ms")
    if not isinstance(last_seen, int | float):
        return False
    return (now_ms - float(last_seen)) < timeout_s * 1000.0


def live_classes(devices: Iterable[Mapping[str, Any]], now_ms: float,
                 timeout_s: float) -> dict[str, ClassView]:
    """Group the live devices by class; a class whose devices are all dead is absent."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for device in devices:
        if device and device_is_live(device, now_ms, timeout_s):
            grouped.setdefault(str(device["device_class"]), []).append(device)
    views = {}
    for device_class, members in grouped.items():
        capabilities: set[tuple[str, str, str]] = set()
        for member in members:
            for cap in member.get("capabilities") or ():
                if isinstance(cap, list | tuple) and len(cap) == 3:
                    capabilities.add((str(cap[0]), str(cap[1]), str(cap[2])))
        links = [link for m in members if (link := _member_link(m)) is not None]
        prices = [_member_price(m) for m in members]
        views[device_class] = ClassView(
            device_class=device_class,
            live_instances=len(members),
            capabilities=frozenset(capabilities),
            queue_depth=sum(int(m.get("queue_depth") or 0) for m in members),
            simulated=any(bool(m.get("simulated")) for m in members),
            device_ids=tuple(sorted(str(m.get("device_id")) for m in members)),
            route_partitions=tuple(sorted(
                (str(m.get("device_id")), tuple(sorted({int(p) for p in parts})))
                for m in members if isinstance(parts := m.get("route_partitions"), list)
                and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                        for p in parts))),
            link=Link(max(k.rtt_ms for k in links), min(k.bandwidth_mbit_s for k in links))
            if links else None,
            price_per_hour=max(prices, default=0.0),
            cores=frozenset(core for m in members for core in _member_cores(m)),
            queues=frozenset(group for m in members if (group := _member_queue(m))),
            calibration=class_calibration(members),
            setup_excess=class_setup_excess(members),
        )
    return views


def check_calibration(calibration: object) -> None:
    """ValueError unless ``calibration`` is null or maps known precisions to positive, finite
    GFLOP/s (a heartbeat's ``calibration``)."""
    if calibration is None:
        return
    if not isinstance(calibration, Mapping):
        raise ValueError("calibration is an object of GFLOP/s by precision, or null")
    for precision, rate in calibration.items():
        if precision not in PRECISIONS:
            raise ValueError(f"calibration names an unknown precision {str(precision)[:20]!r}")
        if not is_rate(rate):
            raise ValueError(f"calibration of {precision} is {rate!r}, not a positive number")


def check_kernel_ms(kernel_ms: object) -> None:
    """ValueError unless ``kernel_ms`` is null or maps op signatures to positive, finite ms by
    known precision (a heartbeat's ``kernel_ms``). A signature that is not one of today's
    reference ops is allowed (an executor of another version) and ignored."""
    if kernel_ms is None:
        return
    if not isinstance(kernel_ms, Mapping):
        raise ValueError("kernel_ms is an object of ms by precision per reference op, or null")
    for signature, by_precision in kernel_ms.items():
        if len(str(signature)) > 200 or not isinstance(by_precision, Mapping):
            raise ValueError(f"kernel_ms of {str(signature)[:40]!r} is not an object of ms "
                             "by precision")
        for precision, ms in by_precision.items():
            if precision not in PRECISIONS:
                raise ValueError(f"kernel_ms names an unknown precision {str(precision)[:20]!r}")
            if not is_rate(ms):
                raise ValueError(f"kernel_ms of {str(signature)[:40]} {precision} is {ms!r}, "
                                 "not a positive number")


def _is_setup_ms(ms: object) -> bool:
    """A usable setup time: a finite number >= 0 (not a bool)."""
    return (isinstance(ms, int | float) and not isinstance(ms, bool) and math.isfinite(ms)
            and ms >= 0)


def check_setup_excess(setup_excess: object) -> None:
    """ValueError unless ``setup_excess`` is null or maps known modes to finite ms >= 0 (a
    heartbeat's ``setup_excess_ms``)."""
    if setup_excess is None:
        return
    if not isinstance(setup_excess, Mapping):
        raise ValueError("setup_excess_ms is an object of ms by mode, or null")
    for mode, ms in setup_excess.items():
        if mode not in MODES:
            raise ValueError(f"setup_excess_ms names an unknown mode {str(mode)[:20]!r}")
        if not _is_setup_ms(ms):
            raise ValueError(f"setup_excess_ms of {mode} is {ms!r}, not a number >= 0")


def class_setup_excess(members: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, float], ...]:
    """Sorted (mode, ms) pairs, each the median over the devices whose heartbeats'
    ``setup_excess_ms`` report it (finite numbers >= 0 of known modes; anything else is
    ignored)."""
    values: dict[str, list[float]] = {}
    for member in members:
        reported = member.get("setup_excess_ms")
        if not isinstance(reported, Mapping):
            continue
        for mode, ms in reported.items():
            if mode in MODES and _is_setup_ms(ms):
                values.setdefault(str(mode), []).append(float(ms))
    return tuple((mode, statistics.median(v)) for mode, v in sorted(values.items()))


def class_calibration(members: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, float], ...]:
    """Sorted (key, value) pairs, each the median over the devices that report it: per
    precision the matmul GFLOP/s of their heartbeats' ``calibration``, and per
    ``kernel_key(kind, precision)`` the ms of their ``kernel_ms`` for that kind's reference op
    (positive, finite numbers of today's reference ops; anything else is ignored)."""
    values: dict[str, list[float]] = {}
    for member in members:
        calibration = member.get("calibration")
        if isinstance(calibration, Mapping):
            for precision, rate in calibration.items():
                if is_rate(rate):
                    values.setdefault(str(precision), []).append(float(rate))
        kernel_ms = member.get("kernel_ms")
        if not isinstance(kernel_ms, Mapping):
            continue
        for signature, by_precision in kernel_ms.items():
            kind = reference_kind(str(signature))
            if kind is None or not isinstance(by_precision, Mapping):
                continue
            for precision, ms in by_precision.items():
                if is_rate(ms):
                    values.setdefault(kernel_key(kind, str(precision)), []).append(float(ms))
    return tuple((key, statistics.median(v)) for key, v in sorted(values.items()))


def _member_cores(device: Mapping[str, Any]) -> list[tuple[str, int]]:
    """A device record's (host, core) pairs; none where it is unpinned, names no host, or does
    not execute on the host's CPU: a simulated device sleeps its executions out and an
    accelerator runs them on itself, so executors of either pinned to one core do not take
    turns on it for their work (counted as sharing it, the simulated H100 of
    tests/integration/test_pipeline.py looked as costly to the torch and NumPy executors'
    queued work on its core as a real one, and its work went to the simulated CPU core)."""
    if device.get("simulated") or device.get("device", "cpu") != "cpu":
        return []
    host, cpus = device.get("host"), device.get("cpus")
    if not isinstance(host, str) or not host or not isinstance(cpus, list):
        return []
    return [(host, c) for c in cpus if isinstance(c, int) and not isinstance(c, bool)]


def _member_queue(device: Mapping[str, Any]) -> tuple[str, str] | None:
    """A device record's (host, queue group); None for an executor with a compute thread of
    its own."""
    host, group = device.get("host"), device.get("queue_group")
    if not isinstance(group, str) or not group:
        return None
    return (host if isinstance(host, str) else "", group)


def _member_link(device: Mapping[str, Any]) -> Link | None:
    """A device record's declared link (the registry refused malformed ones; None here)."""
    try:
        return parse_link(device.get("link"))
    except ValueError:
        return None


def _member_price(device: Mapping[str, Any]) -> float:
    try:
        return parse_price(device.get("price_per_hour")) or 0.0
    except ValueError:
        return 0.0


@functools.lru_cache(maxsize=4096)
def offered_variants(capabilities: frozenset[tuple[str, str, str]], kind: str,
                     allowed: frozenset[str]) -> tuple[Variant, ...]:
    """The variants a class's capabilities (op kind, precision, mode) offer for ``kind``
    within the ``allowed`` precisions, in (precision, mode) order. Cached: a class's
    capabilities change only when its devices do, and every decision asks."""
    return tuple(Variant(precision=precision, mode=mode) for precision, mode in sorted(
        (precision, mode) for cap_kind, precision, mode in capabilities
        if cap_kind == kind and precision in allowed))


def class_variants(workload: Workload, classes: Mapping[str, ClassView],
                   ) -> Iterator[tuple[str, ClassView, Variant]]:
    """(class, its view, variant) for every live class and variant that can run the workload
    within its allowed precisions, classes in name order.

    A variant is offered only when the class declared the capability (op kind, precision,
    mode): runtimes refuse what they cannot do rather than substitute."""
    kind, allowed = workload.op.kind, frozenset(workload.precisions)
    for device_class in sorted(classes):
        view = classes[device_class]
        for variant in offered_variants(view.capabilities, kind, allowed):
            yield device_class, view, variant


def candidates_for(workload: Workload, classes: Mapping[str, ClassView],
                   backlog_ms: Mapping[str, float],
                   device_wait_ms: Mapping[str, float | None] | None = None) -> list[Candidate]:
    """Every (live class, variant) that can run the workload (``class_variants``), with the
    class's instances, backlog and the wait at its least-loaded device."""
    waits = device_wait_ms or {}
    return [Candidate(device_class=device_class, variant=variant,
                      live_instances=view.live_instances,
                      backlog_ms=float(backlog_ms.get(device_class, 0.0)),
                      device_wait_ms=waits.get(device_class), calibration=view.calibration)
            for device_class, view, variant in class_variants(workload, classes)]
