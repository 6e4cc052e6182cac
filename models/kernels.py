"""NumPy kernels with the contract's exact op semantics, generic in the float dtype.

`models.ops.reference` runs them in float64 (the answer every runtime is checked against);
the NumPy runtime runs the same code in float32. Each kernel computes in the dtype of its
inputs, so callers cast first.
"""

from __future__ import annotations

import numpy as np

LAYERNORM_EPS = 1e-5


def activation(name: str, x: np.ndarray) -> np.ndarray:
    """Apply a named activation elementwise; gelu is the exact erf form, not the tanh one."""
    if name == "none":
        return x
    if name == "relu":
        return np.maximum(x, 0).astype(x.dtype, copy=False)
    if name == "gelu":
        # scipy ships with scikit-learn; numpy has no vectorised erf. Imported here: the worker
        # imports this module but never computes, and scipy.special is half a second of its
        # start-up (and of its recovery after a crash).
        from scipy.special import erf

        half = x.dtype.type(0.5)
        return (half * x * (1 + erf(x / np.sqrt(x.dtype.type(2))))).astype(x.dtype, copy=False)
    if name == "tanh":
        return np.tanh(x)
    if name == "silu":
        return (x / (1 + np.exp(-x))).astype(x.dtype, copy=False)
    raise ValueError(f"unknown activation {name!r}")


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the row max so exp never overflows."""
    shifted = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=-1, keepdims=True)


def layernorm(x: np.ndarray) -> np.ndarray:
    """Normalise the last axis to zero mean and unit (population) variance, eps 1e-5, no affine."""
    mean = np.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    return centred / np.sqrt(var + x.dtype.type(LAYERNORM_EPS))


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, act: str) -> np.ndarray:
    """`act(x @ weight.T + bias)`."""
    y = x @ weight.T
    if bias is not None:
        y = y + bias
    return activation(act, y)


def conv2d(x: np.ndarray, weight: np.ndarray, stride: int, padding: int) -> np.ndarray:
    """NCHW cross-correlation (what every DL framework calls conv2d), square kernel, no bias."""
    if padding:
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kernel = weight.shape[-1]
    # (N, C, H', W', k, k) view without copying; striding the window grid gives the output grid.
    windows = np.lib.stride_tricks.sliding_window_view(x, (kernel, kernel), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", windows, weight, optimize=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """`softmax(q @ k^T / sqrt(head_dim) [+ causal mask]) @ v` over (batch, heads, seq, dim)."""
    scale = q.dtype.type(1.0 / np.sqrt(q.shape[-1]))
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if causal:
        seq = q.shape[-2]
        future = np.triu(np.ones((seq, seq), dtype=bool), k=1)
        scores = np.where(future, -np.inf, scores).astype(q.dtype, copy=False)
    return softmax(scores) @ v


def mlp(x: np.ndarray, weights: list[np.ndarray], act: str) -> np.ndarray:
    """Layers `h @ w_i.T`, no bias, `act` between layers but not after the last."""
    h = x
    for i, w in enumerate(weights):
        h = h @ w.T
        if i < len(weights) - 1:
            h = activation(act, h)
    return h
