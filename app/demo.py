"""``switchyard demo``: everything on one machine, one command, and the dashboard to watch it.

It starts a broker when none answers (and stops it again at the end), a worker, one CPU
executor per runtime (torch, JAX, NumPy; one thread each), a torch executor per CUDA device
when there is one, a few simulated devices with ``--sim``, then sends a synthetic load with a
progress bar. Without ``--once`` it keeps a gentle load going so the dashboard keeps moving,
until Ctrl-C (or SIGTERM), which stops every process it started.

Each run gets its own topic namespace (``demo-<tag>.``) and app id, so a demo never mixes with
another deployment, an earlier demo, or a test session on the same broker; the namespace's
topics are deleted at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app import kafka_local
from app.local import LocalCluster, free_port

CPU_RUNTIMES = ("numpy", "torch", "jax")
SIM_MODELS = ("h100", "l4", "cpu-core")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# Slack for the results of the last workloads, on top of the time the load takes to send.
RESULT_GRACE_S = 120.0


class Interrupted(Exception):
    """SIGTERM turned into an exception, so the same clean-up runs as for Ctrl-C."""


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Show ``what`` with a ticking elapsed time (on a terminal), then how long it took."""
    started = time.monotonic()
    done = threading.Event()
    tty = sys.stderr.isatty()

    def tick() -> None:
        while not done.wait(0.5):
            sys.stderr.write(f"\r{what} ... {time.monotonic() - started:4.0f} s")
            sys.stderr.flush()

    ticker = threading.Thread(target=tick, daemon=True) if tty else None
    if ticker:
        ticker.start()
    else:
        print(f"{what} ...", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        done.set()
        if ticker:
            ticker.join()
        end = "\r" if tty else ""
        print(f"{end}{what}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)


def broker_is_local(broker: str) -> bool:
    """Whether every bootstrap server is on this machine (only then may the demo start one)."""
    hosts = [server.strip().rpartition(":")[0].strip("[]") for server in broker.split(",")]
    return all(host in LOCAL_HOSTS for host in hosts)


def ensure_broker(broker: str) -> bool:
    """Start the local broker when none answers; True when this call started it."""
    if kafka_local.broker_ready(broker, 3.0):
        return False
    if not broker_is_local(broker):
        raise SystemExit(f"switchyard demo: no Kafka broker answers at {broker}, and it is not "
                         "on this machine, so the demo will not start one")
    port = int(broker.split(",")[0].strip().rpartition(":")[2])
    with step(f"starting a local Kafka broker on port {port}"):
        kafka_local.start(port)
    return True


def cuda_devices() -> list[str]:
    """``cuda:N`` for every CUDA device torch sees (none without a GPU)."""
    try:
        import torch
    except ImportError:
        return []
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() \
        else []


def web_port(preferred: int) -> int:
    """``preferred`` when it is free on 127.0.0.1, else any free port."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            return free_port()


def executor_plan(sim: bool, cuda: list[str]) -> list[tuple[str, str]]:
    """(runtime, device) of every executor the demo starts."""
    plan = [(runtime, "cpu") for runtime in CPU_RUNTIMES]
    plan += [("torch", device) for device in cuda]
    if sim:
        plan += [("sim", model) for model in SIM_MODELS]
    return plan


async def delete_namespace_topics(broker: str, prefixes: tuple[str, ...]) -> int:
    """Delete every topic whose name starts with one of ``prefixes`` (the demo's namespace and
    its app id, which prefixes Faust's changelog topics); returns how many."""
    from aiokafka.admin import AIOKafkaAdminClient

    from app.settings import Settings

    admin = AIOKafkaAdminClient(bootstrap_servers=broker,
                                **Settings(broker=broker).kafka_client_kwargs())
    await admin.start()
    try:
        ours = [t for t in await admin.list_topics() if t.startswith(prefixes)]
        if ours:
            await admin.delete_topics(ours)
        return len(ours)
    finally:
        await admin.close()


# Deleting the run's topics is tidiness, not a reason to keep Ctrl-C waiting.
TOPIC_CLEANUP_TIMEOUT_S = 20.0


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run_demo(sim: bool, workloads: int, rate: float, keep_running: bool) -> int:
    """Run the demo; 0 when it ran (and, with ``--once``, every workload got a result)."""
    from app.settings import Settings

    settings = Settings()
    tag = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix=f"switchyard-demo-{tag}-"))
    cluster = LocalCluster(broker=settings.broker, namespace=f"demo-{tag}.",
                           app_id=f"switchyard-demo-{tag}", workdir=workdir,
                           web_port=web_port(settings.web_port))
    started_broker = False
    status = 1
    # Ctrl-C raises Interrupted too, rather than KeyboardInterrupt through asyncio.run: there
    # it only cancels the running task, and a cancellation swallowed anywhere below (a client
    # library's clean-up) let the demo carry on sending — Ctrl-C once did not stop it in CI.
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    previous_int = signal.signal(signal.SIGINT, _raise_interrupted)
    try:
        started_broker = ensure_broker(settings.broker)
        status = _run(cluster, settings, sim, workloads, rate, keep_running)
    except (KeyboardInterrupt, Interrupted):
        print("\ninterrupted: stopping everything the demo started", file=sys.stderr)
        status = 0
    except (RuntimeError, TimeoutError) as exc:  # a process died or never became ready
        print(f"switchyard demo: {exc}", file=sys.stderr)
        status = 1
    finally:
        # A second Ctrl-C must not cut the clean-up short and leave processes behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _clean_up(cluster, settings.broker, started_broker, keep_logs=status != 0)
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous)
    return status


def _run(cluster: LocalCluster, settings: Any, sim: bool, workloads: int, rate: float,
         keep_running: bool) -> int:
    from models.traces import synthetic_trace

    address = f"http://127.0.0.1:{cluster.web_port}/"
    with step("starting the worker"):
        worker = cluster.start_worker()
        plan = executor_plan(sim, cuda_devices())
        executors = [cluster.start_executor(runtime, device, threads=1)
                     for runtime, device in plan]
        cluster.wait_ready(worker, timeout_s=240)
    print(f"dashboard: {address}", flush=True)
    with step(f"waiting for {len(executors)} executors ({', '.join(r + ':' + d for r, d in plan)})"):
        cluster.wait_devices([p.name for p in executors], timeout_s=240)
    from app import submit

    client = settings.model_copy(update={"topic_namespace": cluster.namespace})
    trace = synthetic_trace(workloads, seed=0, id_prefix="demo-")
    timeout_s = workloads / max(rate, 0.1) + RESULT_GRACE_S
    summary = asyncio.run(submit.submit(trace, rate, True, timeout_s, settings=client))
    report = summary.as_dict()
    submit.print_summary(report)
    print(f"dashboard: {address}", flush=True)
    if not keep_running:
        return 0 if report["missing"] == 0 and report["error"] == 0 else 1
    print(f"the demo keeps sending {rate:g} workloads/s; topic namespace {cluster.namespace} "
          f"(export SWITCHYARD_TOPIC_NAMESPACE={cluster.namespace} to submit your own). "
          "Ctrl-C stops everything.", flush=True)
    round_number = 1
    while True:
        trace = synthetic_trace(workloads, seed=round_number, id_prefix=f"demo{round_number}-")
        summary = asyncio.run(submit.submit(trace, rate, False, timeout_s, settings=client,
                                            progress=False))
        print(f"round {round_number}: sent {summary.sent} more workloads", flush=True)
        round_number += 1


def _clean_up(cluster: LocalCluster, broker: str, started_broker: bool, keep_logs: bool) -> None:
    with step(f"stopping {len(cluster.procs)} processes"):
        cluster.stop()
    if kafka_local.broker_ready(broker, 2.0):
        # The topics only matter to this run: leave the broker as tidy as it was.
        with contextlib.suppress(Exception):
            asyncio.run(asyncio.wait_for(delete_namespace_topics(
                broker, (cluster.namespace, cluster.app_id + "-")), TOPIC_CLEANUP_TIMEOUT_S))
    if started_broker:
        kafka_local.stop()
    if keep_logs:
        print(f"logs kept in {cluster.workdir}", file=sys.stderr)
    else:
        shutil.rmtree(cluster.workdir, ignore_errors=True)
