"""Runtimes built once per session, pinned to one thread (the CI machine has two cores)."""

from __future__ import annotations

import os

import pytest

# Before torch/jax/BLAS initialise their pools (jax reads XLA_FLAGS at import).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from runtimes import Runtime, get_runtime  # noqa: E402  (after the thread environment)

CPU_RUNTIMES = ("numpy", "torch", "jax")


@pytest.fixture(scope="session")
def cpu_runtimes() -> dict[str, Runtime]:
    """numpy, torch and jax on the CPU, one thread each."""
    return {name: get_runtime(name, "cpu", threads=1) for name in CPU_RUNTIMES}


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (CUDA tests skip cleanly otherwise)."""
    import torch

    return bool(torch.cuda.is_available())
