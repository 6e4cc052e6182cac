"""Honest isolation: an executor asked for N threads runs on N cores at most.

Runtimes' own thread settings are requests, not limits: XLA's flags alone left a JAX executor
at ~1.7 cores of CPU time per wall second for a 1024³ matmul on a 2-core machine, so live
measurements on a shared machine did not compare like with like. CPU affinity is the limit the
kernel enforces. ``pin_process`` sets it for every thread the process already has (NumPy's BLAS
pool starts at import, before any runtime is built) and, through inheritance, every thread
started later (torch's, XLA's).

Which cores: ``--cpus`` names them ("2", "0-3", "0,2,4-5"); without it an executor asked for
N threads takes the N least busy of the cores it may use, measured for a moment at start-up, so
executors started side by side spread over the machine rather than piling onto core 0.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)
LOAD_SAMPLE_S = 0.2  # how long per-core load is measured when the cores are chosen
LOAD_STEP_PCT = 25.0  # loads within one step count as equal


def parse_cpus(spec: str) -> tuple[int, ...]:
    """CPU numbers of a list such as ``"0-3,6"`` (sorted, distinct); ValueError if malformed."""
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"cpu list {spec!r} has an empty item")
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise ValueError(f"cpu list {spec!r}: {part!r} is not a cpu number or a range "
                             "such as 0-3") from None
        if first < 0 or last < first:
            raise ValueError(f"cpu list {spec!r}: {part!r} is not a range of cpu numbers")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def allowed_cpus() -> tuple[int, ...]:
    """The cores this process may run on now."""
    return tuple(sorted(os.sched_getaffinity(0)))


def least_busy(candidates: Iterable[int], count: int, load: list[float] | None = None,
               seed: int | None = None) -> tuple[int, ...]:
    """The ``count`` least busy of ``candidates``: per-core busy % (``load``, else measured for
    ``LOAD_SAMPLE_S``) in steps of ``LOAD_STEP_PCT``, so executors started together, which see
    about the same load, break the tie by their pid (``seed``) and spread instead of all taking
    the lowest-numbered core."""
    pool = sorted(candidates)
    if load is None:
        import psutil

        load = psutil.cpu_percent(interval=LOAD_SAMPLE_S, percpu=True)
    turn = os.getpid() if seed is None else seed

    def rank(index_cpu: tuple[int, int]) -> tuple[int, int]:
        index, cpu = index_cpu
        busy = load[cpu] if cpu < len(load) else 0.0
        return int(busy // LOAD_STEP_PCT), (index - turn) % len(pool)

    ranked = sorted(enumerate(pool), key=rank)
    return tuple(sorted(cpu for _, cpu in ranked[:count]))


def choose_cpus(threads: int | None, cpus: str | None,
                allowed: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
    """The cores to pin to, or None to leave the process unpinned (neither option given).

    ValueError with the reason when the list names a core this process may not use, or holds
    fewer cores than the threads asked for.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    allowed = allowed_cpus() if allowed is None else allowed
    if cpus is not None:
        chosen = parse_cpus(cpus)
        outside = sorted(set(chosen) - set(allowed))
        if outside:
            raise ValueError(f"--cpus {cpus}: cpu {', '.join(map(str, outside))} not available "
                             f"to this process (allowed: {format_cpus(allowed)})")
        if threads is not None and threads > len(chosen):
            raise ValueError(f"{threads} threads asked for on {len(chosen)} cpu(s) ({cpus}): "
                             "give --cpus at least as many cores as --threads")
        return chosen
    if threads is None:
        return None
    if threads > len(allowed):
        raise ValueError(f"{threads} threads asked for, but this process may use only "
                         f"{len(allowed)} cpu(s) ({format_cpus(allowed)})")
    return least_busy(allowed, threads)


def format_cpus(cpus: Iterable[int]) -> str:
    """``(0, 1, 2, 5)`` → ``"0-2,5"``."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _set_all_threads(mask: set[int]) -> None:
    os.sched_setaffinity(0, mask)  # the calling thread: threads it starts inherit the mask
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), mask)
        except (ProcessLookupError, ValueError):
            continue  # a thread that ended meanwhile


def pin_process(cpus: tuple[int, ...]) -> None:
    """Restrict every thread of this process, and each it starts later, to ``cpus``."""
    _set_all_threads(set(cpus))
    logger.info("pinned to cpu(s) %s", format_cpus(cpus))


def isolate(threads: int | None, cpus: str | None) -> tuple[int | None, tuple[int, ...] | None]:
    """Choose and apply the cores for an executor (before its runtime is built); return the
    intra-op threads to ask the runtime for (one per core when only ``--cpus`` was given) and
    the cores pinned (None: unpinned)."""
    chosen = choose_cpus(threads, cpus)
    if chosen is None:
        return threads, None
    pin_process(chosen)
    return (len(chosen) if threads is None else threads), chosen


@contextmanager
def cores_given_back() -> Iterator[None]:
    """On exit, every thread of the process gets back the cores it may use now: for pinning
    done inside a longer-lived process (``run_profile`` called from Python, a test)."""
    before = set(os.sched_getaffinity(0))
    try:
        yield
    finally:
        _set_all_threads(before)
