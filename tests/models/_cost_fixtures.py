"""Shared strategies and synthetic worlds for the cost-model and policy tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st

from models.ops import OpSpec, Variant, parse_op, supports_precision

dim = st.integers(min_value=1, max_value=256)
small = st.integers(min_value=1, max_value=8)


def _op_dicts() -> st.SearchStrategy[dict]:
    return st.one_of(
        st.fixed_dictionaries({"kind": st.just("matmul"), "m": dim, "k": dim, "n": dim}),
        st.fixed_dictionaries({"kind": st.just("bmm"), "b": small, "m": dim, "k": dim, "n": dim}),
        st.fixed_dictionaries(
            {
                "kind": st.just("linear"),
                "batch": dim,
                "in_features": dim,
                "out_features": dim,
                "bias": st.booleans(),
                "activation": st.sampled_from(["none", "relu", "gelu"]),
            }
        ),
        st.fixed_dictionaries(
            {
                "kind": st.just("conv2d"),
                "batch": small,
                "in_channels": small,
                "out_channels": small,
                "height": st.integers(8, 64),
                "width": st.integers(8, 64),
                "kernel": st.integers(1, 5),
                "stride": st.integers(1, 2),
                "padding": st.integers(0, 2),
            }
        ),
        st.fixed_dictionaries(
            {
                "kind": st.just("attention"),
                "batch": small,
                "heads": small,
                "seq_len": dim,
                "head_dim": st.integers(1, 128),
                "causal": st.booleans(),
            }
        ),
        st.fixed_dictionaries({"kind": st.just("layernorm"), "rows": dim, "dim": dim}),
        st.fixed_dictionaries({"kind": st.just("softmax"), "rows": dim, "dim": dim}),
        st.fixed_dictionaries(
            {"kind": st.just("mlp"), "batch": dim, "dims": st.lists(dim, min_size=2, max_size=4)}
        ),
    )


ops = _op_dicts().map(parse_op)


@st.composite
def op_and_variant(draw: st.DrawFn) -> tuple[OpSpec, Variant]:
    """A valid (op, variant) pair: int8 only where the contract allows it."""
    op = draw(ops)
    allowed = [
        p for p in ("fp32", "tf32", "bf16", "fp16", "int8") if supports_precision(op.kind, p)
    ]
    variant = Variant(draw(st.sampled_from(allowed)), draw(st.sampled_from(["eager", "compiled"])))
    return op, variant


def random_matmuls(
    rng: np.random.Generator, n: int, low: int = 16, high: int = 1024
) -> list[OpSpec]:
    """n matmuls with log-uniform dimensions."""
    dims = np.exp(rng.uniform(np.log(low), np.log(high), size=(n, 3))).astype(int)
    return [
        parse_op({"kind": "matmul", "m": int(m), "k": int(k), "n": int(nn)}) for m, k, nn in dims
    ]


def random_mixed_ops(rng: np.random.Generator, n: int) -> list[OpSpec]:
    """n ops of mixed kinds with log-uniform sizes (GEMMs, norms, attention)."""
    out: list[OpSpec] = []
    for _ in range(n):
        choice = rng.integers(0, 5)
        a, b, c = (int(v) for v in np.exp(rng.uniform(np.log(16), np.log(768), size=3)))
        if choice == 0:
            out.append(parse_op({"kind": "matmul", "m": a, "k": b, "n": c}))
        elif choice == 1:
            out.append(
                parse_op({"kind": "linear", "batch": a, "in_features": b, "out_features": c})
            )
        elif choice == 2:
            out.append(parse_op({"kind": "layernorm", "rows": a, "dim": b}))
        elif choice == 3:
            out.append(parse_op({"kind": "softmax", "rows": a, "dim": c}))
        else:
            out.append(
                parse_op(
                    {
                        "kind": "attention",
                        "batch": 1,
                        "heads": 4,
                        "seq_len": min(a, 256),
                        "head_dim": 64,
                    }
                )
            )
    return out


def roofline_world(
    peak_flops: float,
    bandwidth: float,
    overhead_ms: float,
    kind_factor: dict[str, float] | None = None,
) -> Callable[[OpSpec, Variant], float]:
    """A synthetic device: roofline time in ms with per-kind inefficiency factors."""
    factors = kind_factor or {}

    def true_ms(op: OpSpec, variant: Variant) -> float:
        compute = op.flops() / peak_flops
        memory = op.bytes_moved(variant.precision) / bandwidth
        return overhead_ms + 1e3 * max(compute, memory) * factors.get(op.kind, 1.0)

    return true_ms
