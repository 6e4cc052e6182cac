"""The executor process's entry point: options, CPU pinning, the runtime, then the serving loop
(app/executor.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.executor import Executor, default_device_id
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
    instances: int = 1,
) -> int:
    """Build the runtime and serve its route topic until SIGTERM (blocking); the exit code.
    The link, price and power model given here replace the settings'. ``instances`` > 1 (sim
    only): that many simulated devices in this process, each its own runtime, device id
    (``<id>-<i>``), consumer and producer — a fleet of many simulated devices without a
    process each. ``runtime`` may name several runtimes, comma-separated: one executor each
    on ``device`` in this process (device ids ``<id>-<runtime>``), sharing one compute
    thread — their executions run one at a time, in the order they arrived — and one queue
    group, which their heartbeats name so the router counts them as one queue."""
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
    names = runtime.split(",")
    if len(names) > 1 and (instances != 1 or drift is not None):
        logger.error("--runtime %s: several runtimes in one process take neither "
                     "--instances nor --drift", runtime)
        return 2
    if instances < 1 or (instances > 1 and runtime != "sim"):
        logger.error("--instances %d: a positive count, and more than 1 for --runtime sim only "
                     "(a real device is served by a process of its own)", instances)
        return 2
    options: dict[str, Any] = {}
    if drift is not None:
        if runtime != "sim":
            logger.error("--drift applies to the sim runtime only")
            return 2
        options["drift"] = drift
    try:
        # Pinned before the runtime is built, so its thread pools start inside the mask.
        threads, pinned = isolate(threads, cpus)
    except (ValueError, OSError) as exc:
        logger.error("cannot pin %s to cpus: %s", runtime, exc)
        return 2
    compile_cpu = {"compile_cpu": True} if settings.torch_compile_cpu else {}
    try:
        runtimes = [get_runtime(name, device, threads=threads, **options,
                                **(compile_cpu if name == "torch" else {}))
                    for name in (names if len(names) > 1 else names * instances)]
    except (RuntimeError, ValueError, SpecError) as exc:
        logger.error("cannot start %s on %s: %s", runtime, device, exc)
        return 2
    for rt in runtimes:
        if model is not None and not rt.simulated:
            rt.power_model = model
    tune_gc(settings.gc_gen0_threshold)  # the runtime's modules are loaded: freeze them
    if len(names) > 1:  # one compute thread between them: one queue
        compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compute")
        group = f"{os.getpid()}-{'+'.join(names)}"
        try:
            return run_loop(run_instances([
                Executor(settings, rt, f"{device_id}-{rt.name}" if device_id else None,
                         slowdown_file, threads, pinned, link=link, price_per_hour=price,
                         queue=(compute, group)) for rt in runtimes]))
        finally:
            compute.shutdown(wait=True)
    if instances == 1:
        return run_loop(Executor(settings, runtimes[0], device_id, slowdown_file, threads, pinned,
                                 link=link, price_per_hour=price).run())
    base = device_id or default_device_id(runtimes[0])
    return run_loop(run_instances([
        Executor(settings, rt, f"{base}-{i}", slowdown_file, threads, pinned, link=link,
                 price_per_hour=price) for i, rt in enumerate(runtimes)]))


async def run_instances(executors: Sequence[Executor]) -> int:
    """Serve several executors in one process (simulated devices, ``--instances``): SIGTERM or
    SIGINT stops all of them, one that fails stops the others; the largest exit code."""
    loop = asyncio.get_running_loop()

    def stop_all() -> None:
        for executor in executors:
            executor.stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_all)
    tasks = [asyncio.create_task(executor.run(handle_signals=False)) for executor in executors]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    if pending:
        stop_all()
        await asyncio.wait(pending)
    codes = []
    for executor, task in zip(executors, tasks, strict=True):
        failure = task.exception()
        if failure is not None:
            logger.error("executor %s failed", executor.device_id, exc_info=failure)
        codes.append(1 if failure is not None else task.result())
    return max(codes)


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
