"""The event loop the processes run on: the standard asyncio loop unless asked for uvloop.

``SWITCHYARD_EVENT_LOOP=uvloop`` (uvloop is a dependency) runs the worker and the executors on
uvloop. It is not the default: no gain was measured apart from the other hot-path changes, and
one long worker-crash run on uvloop stalled (the restarted worker stopped producing results
with every task waiting; RELIABILITY.md). Faust picks its loop from ``FAUST_LOOP`` when
``faust`` is first imported, so the entry points call ``choose_event_loop`` before importing
``app.main``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def wanted() -> str:
    """``uvloop`` or ``asyncio``: what the environment asks for and this host has."""
    choice = os.environ.get("SWITCHYARD_EVENT_LOOP", "asyncio").strip().lower()
    if choice not in ("uvloop", "asyncio"):
        raise ValueError(f"SWITCHYARD_EVENT_LOOP must be uvloop or asyncio, not {choice!r}")
    if choice == "uvloop" and importlib.util.find_spec("uvloop") is None:
        return "asyncio"
    return choice


def choose_event_loop() -> str:
    """Tell Faust which loop to use (unless FAUST_LOOP already says); return the choice."""
    choice = wanted()
    if choice == "uvloop":
        os.environ.setdefault("FAUST_LOOP", "uvloop")
    return os.environ.get("FAUST_LOOP", "aio")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the chosen loop (the executor's entry point), with the stack dump
    on SIGUSR1 (``install_stack_dump``)."""
    install_stack_dump()
    if wanted() == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


# The worker's linear algebra is on matrices of the cost model's 73 weights: one BLAS thread is
# all it can use. OpenBLAS's pool spins for a while after every call, and on the metric stage's
# small batches at low load that spinning cost the worker more CPU than all its stages
# (10 workloads/s: 48.7 ms of CPU a workload with OpenBLAS's default pool, 21.8 with one
# thread); pinned to one core, the spinning threads also took turns with the event loop.
WORKER_BLAS_THREADS = 1


def limit_blas_threads(threads: int = WORKER_BLAS_THREADS) -> None:
    """Hold this process's BLAS (and OpenMP) pools to ``threads`` threads from now on."""
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

    threadpool_limits(limits=threads)


def tune_gc(gen0_threshold: int) -> None:
    """Move what start-up allocated out of the collector's sight (``gc.freeze``: it is never
    garbage, and every full collection walked it) and collect the young generation every
    ``gen0_threshold`` allocations instead of 700 (0 keeps Python's thresholds). Cycles are
    still collected, just in fewer, larger passes."""
    import gc

    gc.collect()
    gc.freeze()
    if gen0_threshold > 0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0_threshold, gen1, gen2)


STACK_DUMP_SIGNAL = "SIGUSR1"


def install_stack_dump() -> None:
    """On SIGUSR1, write every thread's stack (faulthandler: even while the event loop is stuck
    in a blocking call) and then every asyncio task's (where each coroutine awaits) to
    stderr, the process's log. For a process that stopped making progress while alive: a
    reliability scenario that fails sends it before stopping its processes
    (``LocalCluster.stop(dump=True)``), and an operator can send it with ``kill -USR1``.
    Installed by the executors (``run``); the Faust worker has its own on the same signal
    (mode's ``Worker`` "cry": every thread and every task with their locals, written by its
    event loop), which replaces this one there."""
    import faulthandler
    import signal
    import sys

    def dump_tasks(signum: int, frame: Any) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            print("stack dump: no event loop running in the main thread", file=sys.stderr)
            return
        tasks = asyncio.all_tasks(loop)
        print(f"stack dump: {len(tasks)} asyncio task(s)", file=sys.stderr)
        for task in tasks:
            print(f"--- {task.get_name()} {task.get_coro()!r}", file=sys.stderr)
            task.print_stack(limit=12, file=sys.stderr)
        sys.stderr.flush()

    sig = getattr(signal, STACK_DUMP_SIGNAL)
    signal.signal(sig, dump_tasks)
    # Threads first, from C (chain: then the tasks, from Python, once the loop gets control).
    faulthandler.register(sig, file=sys.stderr, all_threads=True, chain=True)
