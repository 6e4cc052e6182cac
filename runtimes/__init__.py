"""Executor runtimes: torch, jax, numpy and the simulator, behind one factory.

Backends are imported lazily so a NumPy- or sim-only process never pays for importing torch
or jax (seconds each), and so XLA thread flags can be set before jax is first imported.
"""

from __future__ import annotations

from typing import Any

from runtimes.base import Execution, Runtime, VariantRefused

RUNTIME_NAMES: tuple[str, ...] = ("torch", "jax", "numpy", "sim")

__all__ = ["RUNTIME_NAMES", "Execution", "Runtime", "VariantRefused", "get_runtime"]


def get_runtime(name: str, device: str, threads: int | None = None, **options: Any) -> Runtime:
    """Build runtime ``name`` on ``device``; ``threads`` pins intra-op threads.

    Options per runtime: torch ``compile_cpu: bool``; sim ``drift: str``, ``noise_sigma``,
    ``seed``. Raises RuntimeError when the device does not exist, ValueError for an unknown
    runtime name.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if name == "torch":
        from runtimes.torch_rt import TorchRuntime

        return TorchRuntime(device, threads=threads, **options)
    if name == "jax":
        from runtimes.jax_rt import JaxRuntime

        return JaxRuntime(device, threads=threads, **options)
    if name == "numpy":
        from runtimes.numpy_rt import NumpyRuntime

        return NumpyRuntime(device, threads=threads, **options)
    if name == "sim":
        from runtimes.sim_rt import SimRuntime

        return SimRuntime(device, threads=threads, **options)
    raise ValueError(f"unknown runtime {name!r}; expected one of {RUNTIME_NAMES}")
