"""Tiny op cases covering every kind, activation and option, shared by runtime tests."""

from __future__ import annotations

from typing import Any

from models.ops import OpSpec, parse_op

CASES: dict[str, dict[str, Any]] = {
    "matmul": {"kind": "matmul", "m": 5, "k": 24, "n": 3},
    "bmm": {"kind": "bmm", "b": 2, "m": 4, "k": 16, "n": 6},
    "linear-gelu": {
        "kind": "linear",
        "batch": 3,
        "in_features": 20,
        "out_features": 9,
        "activation": "gelu",
    },
    "linear-silu-nobias": {
        "kind": "linear",
        "batch": 4,
        "in_features": 8,
        "out_features": 5,
        "bias": False,
        "activation": "silu",
    },
    "conv2d-s2p1": {
        "kind": "conv2d",
        "batch": 2,
        "in_channels": 3,
        "out_channels": 4,
        "height": 9,
        "width": 7,
        "kernel": 3,
        "stride": 2,
        "padding": 1,
    },
    "conv2d-1x1": {
        "kind": "conv2d",
        "batch": 1,
        "in_channels": 8,
        "out_channels": 2,
        "height": 3,
        "width": 3,
        "kernel": 1,
    },
    "attention-causal": {
        "kind": "attention",
        "batch": 1,
        "heads": 2,
        "seq_len": 7,
        "head_dim": 8,
        "causal": True,
    },
    "attention": {"kind": "attention", "batch": 2, "heads": 1, "seq_len": 5, "head_dim": 4},
    "layernorm": {"kind": "layernorm", "rows": 3, "dim": 33},
    "softmax": {"kind": "softmax", "rows": 4, "dim": 17},
    "mlp-relu": {"kind": "mlp", "batch": 3, "dims": [12, 24, 16, 5]},
    "mlp-tanh": {"kind": "mlp", "batch": 2, "dims": [6, 10], "activation": "tanh"},
    "matmul-f16-io": {"kind": "matmul", "m": 3, "k": 8, "n": 4, "dtype": "float16"},
    "softmax-f64-io": {"kind": "softmax", "rows": 2, "dim": 9, "dtype": "float64"},
}


def case(name: str) -> OpSpec:
    """The parsed spec of a named case."""
    return parse_op(CASES[name])
