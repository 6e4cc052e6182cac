"""Benchmarks: ``switchyard bench
scheduling|costmodel|pipeline|drift|batching|offload|fleetsim|layers|priors [--quick]``.

Each writes JSON and PNG under ``bench/out/`` and replaces its section of ``BENCHMARKS.md``.
Benchmarks report; they never assert on timings.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

BENCHMARK_NAMES: tuple[str, ...] = ("scheduling", "costmodel", "pipeline", "drift", "batching",
                                    "offload", "fleetsim", "layers", "priors")


def run_benchmark(name: str, quick: bool, out_dir: Path) -> int:
    """Run benchmark ``name`` (quick: under 5 minutes); returns the exit code."""
    if name not in BENCHMARK_NAMES:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {BENCHMARK_NAMES}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    module = importlib.import_module(f"bench.{name}")
    return int(module.run(quick=quick, out_dir=Path(out_dir)))
