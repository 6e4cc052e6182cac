"""Synthetic workload traces: a mix of contract ops at sizes where device classes differ.

Used by the demo, the benchmarks and the sample trace in ``traces/``. Sizes are kept small
enough that a 2-core machine runs hundreds per minute on its CPU runtimes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# (weight, op) pairs. Small ops are dominated by per-call overhead (where NumPy wins), larger
# matmul-like ops by FLOP rate (where torch/JAX's kernels win): a router has to learn both.
DEFAULT_MIX: tuple[tuple[float, dict[str, Any]], ...] = (
    (3, {"kind": "matmul", "m": 16, "k": 16, "n": 16}),
    (3, {"kind": "matmul", "m": 128, "k": 128, "n": 128}),
    (2, {"kind": "matmul", "m": 256, "k": 256, "n": 256}),
    (1, {"kind": "bmm", "b": 8, "m": 64, "k": 64, "n": 64}),
    (2, {"kind": "linear", "batch": 64, "in_features": 256, "out_features": 256, "bias": True,
         "activation": "gelu"}),
    (1, {"kind": "conv2d", "batch": 2, "in_channels": 8, "out_channels": 16, "height": 32,
         "width": 32, "kernel": 3, "stride": 1, "padding": 1}),
    (1, {"kind": "attention", "batch": 2, "heads": 4, "seq_len": 64, "head_dim": 32,
         "causal": True}),
    (2, {"kind": "layernorm", "rows": 256, "dim": 256}),
    (2, {"kind": "softmax", "rows": 256, "dim": 256}),
    (1, {"kind": "mlp", "batch": 32, "dims": [128, 256, 128], "activation": "relu"}),
)


def synthetic_trace(count: int, seed: int = 0, precisions: Sequence[str] = ("fp32",),
                    mix: Sequence[tuple[float, dict[str, Any]]] = DEFAULT_MIX,
                    id_prefix: str = "w", deadline_ms: float | None = None,
                    ) -> list[dict[str, Any]]:
    """``count`` workloads drawn from ``mix`` with a seeded generator (same seed, same trace).

    Precisions other than fp32 are offered only to op kinds that accept them (int8 only for
    matmul, linear and mlp, as the contract says).
    """
    rng = np.random.default_rng(seed)
    weights = np.array([w for w, _ in mix], dtype=float)
    choices = rng.choice(len(mix), size=count, p=weights / weights.sum())
    trace = []
    for i, choice in enumerate(choices):
        op = {**mix[int(choice)][1], "dtype": "float32"}
        allowed = [p for p in precisions
                   if p != "int8" or op["kind"] in ("matmul", "linear", "mlp")] or ["fp32"]
        workload: dict[str, Any] = {"id": f"{id_prefix}{i:06d}", "op": op,
                                    "precisions": allowed, "seed": int(rng.integers(1 << 31))}
        if deadline_ms is not None:
            workload["deadline_ms"] = deadline_ms
        trace.append(workload)
    return trace


def poisson_gaps(count: int, rate_per_s: float, seed: int = 0) -> np.ndarray:
    """Inter-arrival gaps (seconds) of a Poisson process at ``rate_per_s``."""
    return np.random.default_rng(seed + 1).exponential(1.0 / rate_per_s, size=count)
