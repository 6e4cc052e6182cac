"""The executor process's entry point: options, CPU pinning, the runtime, then the serving loop
(app/executor.py)."""

from __future__ import annotations

import logging
from typing import Any

from app.executor import Executor
from app.loop import run as run_loop
from app.loop import tune_gc
from app.settings import Settings, get_settings
from models.devices import DEVICE_CATALOG, DeviceSpec
from models.ops import SpecError
from models.transfer import Link, parse_price
from runtimes import get_runtime
from runtimes.affinity import isolate

logger = logging.getLogger(__name__)


def run_executor(
    runtime: str,
    device: str,
    threads: int | None,
    device_id: str | None,
    slowdown_file: str | None,
    drift: str | None,
    cpus: str | None = None,
    link_rtt_ms: float | None = None,
    link_bandwidth_mbit_s: float | None = None,
    price_per_hour: float | None = None,
    power_model: str | None = None,
) -> int:
    """Build the runtime and serve its route topic until SIGTERM (blocking); the exit code.
    The link, price and power model given here replace the settings'."""
    settings = get_settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        link, price, model = remote_options(settings, link_rtt_ms, link_bandwidth_mbit_s,
                                            price_per_hour, power_model)
    except ValueError as exc:
        logger.error("%s", exc)
        return 2
    options: dict[str, Any] = {}
    if drift is not None:
        if runtime != "sim":
            logger.error("--drift applies to the sim runtime only")
            return 2
        options["drift"] = drift
    if runtime == "torch" and settings.torch_compile_cpu:
        options["compile_cpu"] = True
    try:
        # Pinned before the runtime is built, so its thread pools start inside the mask.
        threads, pinned = isolate(threads, cpus)
    except (ValueError, OSError) as exc:
        logger.error("cannot pin %s to cpus: %s", runtime, exc)
        return 2
    try:
        rt = get_runtime(runtime, device, threads=threads, **options)
    except (RuntimeError, ValueError, SpecError) as exc:
        logger.error("cannot start %s on %s: %s", runtime, device, exc)
        return 2
    if model is not None and not rt.simulated:
        rt.power_model = model
    tune_gc(settings.gc_gen0_threshold)  # the runtime's modules are loaded: freeze them
    return run_loop(Executor(settings, rt, device_id, slowdown_file, threads, pinned,
                             link=link, price_per_hour=price).run())


def remote_options(settings: Settings, rtt_ms: float | None, bandwidth_mbit_s: float | None,
                   price_per_hour: float | None, power_model: str | None,
                   ) -> tuple[Link | None, float | None, DeviceSpec | None]:
    """The executor's link, price and power model: the options given, else the settings';
    ValueError with the reason when one is malformed (a negative bandwidth, half a link, an
    unknown catalog device)."""
    rtt = rtt_ms if rtt_ms is not None else settings.executor_link_rtt_ms
    bandwidth = (bandwidth_mbit_s if bandwidth_mbit_s is not None
                 else settings.executor_link_bandwidth_mbit_s)
    if (rtt is None) != (bandwidth is None):
        raise ValueError("a link needs both --link-rtt-ms and --link-bandwidth-mbit-s")
    link = None if rtt is None or bandwidth is None else Link(rtt, bandwidth)
    price = parse_price(price_per_hour if price_per_hour is not None
                        else settings.executor_price_per_hour)
    name = power_model if power_model is not None else settings.executor_power_model
    model = None
    if name:
        if name not in DEVICE_CATALOG:
            raise ValueError(f"no catalog device {name!r} for --power-model; catalog: "
                             f"{sorted(DEVICE_CATALOG)}")
        model = DEVICE_CATALOG[name]
    return link, price, model
