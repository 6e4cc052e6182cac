"""JAX runtime on whatever ``jax.devices()`` offers: cpu, gpu (``cuda:N``), tpu (``tpu:N``).

Modes: ``compiled`` is ``jax.jit(...).lower(...).compile()`` once per (shape, variant), the
compile timed as ``compile_ms`` and cached; ``eager`` is JAX's op-by-op dispatch (each
primitive compiled and cached by JAX itself on the untimed warm-up).
Precisions: fp32 at ``default_matmul_precision("float32")`` (no TF32/bf16 passes on GPU/TPU);
tf32 on Ampere+ GPUs; bf16 everywhere; fp16 on CPU and GPU (TPUs have no fp16 units);
int8 for linear/matmul/mlp by dynamic quantization: per-row activation scales computed in the
timed region, per-channel weight scales packed untimed, ``int8 x int8 -> int32`` dots.
Reductions (softmax, layernorm statistics) accumulate in fp32, as torch's kernels do.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import numpy as np

from models.ops import OpSpec, Variant
from runtimes.base import (
    Runtime,
    accelerator_model,
    contract_refusal,
    device_class_name,
    machine_arch,
)
from runtimes.energy import meter_for

logger = logging.getLogger(__name__)
_MATMUL_PRECISION = {"fp32": "float32", "tf32": "tensorfloat32"}


def configure_xla_threads(threads: int | None) -> None:
    """Pin XLA's CPU intra-op threads; must run before jax is imported to take effect."""
    if threads is None:
        return
    if "jax" in sys.modules:
        logger.warning("jax already imported; XLA thread pinning (%d) may not apply", threads)
    flags = os.environ.get("XLA_FLAGS", "")
    extra = f"intra_op_parallelism_threads={threads}"
    if threads == 1:
        extra = "--xla_cpu_multi_thread_eigen=false " + extra
    if "intra_op_parallelism_threads" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {extra}".strip()


def _act(jax: Any, name: str, y: Any) -> Any:
    if name == "relu":
        return jax.nn.relu(y)
    if name == "gelu":
        return jax.nn.gelu(y, approximate=False)  # exact erf form
    if name == "tanh":
        return jax.numpy.tanh(y)
    if name == "silu":
        return jax.nn.silu(y)
    return y


def jax_op_function(spec: OpSpec) -> Any:
    """``f(arrays: dict) -> array`` with the contract's semantics (float variants)."""
    import jax
    import jax.numpy as jnp

    kind = spec.kind

    def softmax(x: Any) -> Any:
        return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)

    if kind in ("matmul", "bmm"):
        return lambda t: jnp.matmul(t["a"], t["b"])
    if kind == "linear":

        def linear(t: dict[str, Any]) -> Any:
            y = jnp.matmul(t["x"], t["weight"].T)
            if "bias" in t:
                y = y + t["bias"]
            return _act(jax, spec.activation, y)  # type: ignore[union-attr]

        return linear
    if kind == "conv2d":
        s, p = spec.stride, spec.padding  # type: ignore[union-attr]
        return lambda t: jax.lax.conv_general_dilated(
            t["x"],
            t["weight"],
            (s, s),
            [(p, p), (p, p)],
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
        )
    if kind == "attention":
        causal, seq = spec.causal, spec.seq_len  # type: ignore[union-attr]
        scale = 1.0 / float(np.sqrt(spec.head_dim))  # type: ignore[union-attr]

        def attention(t: dict[str, Any]) -> Any:
            q, k, v = t["q"], t["k"], t["v"]
            scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * jnp.asarray(scale, q.dtype)
            if causal:
                future = jnp.triu(jnp.ones((seq, seq), dtype=bool), k=1)
                scores = jnp.where(future, jnp.asarray(-jnp.inf, q.dtype), scores)
            return jnp.matmul(softmax(scores), v)

        return attention
    if kind == "layernorm":

        def layernorm(t: dict[str, Any]) -> Any:
            x = t["x"].astype(jnp.float32)
            mean = x.mean(axis=-1, keepdims=True)
            var = jnp.square(x - mean).mean(axis=-1, keepdims=True)
            return ((x - mean) * jax.lax.rsqrt(var + 1e-5)).astype(t["x"].dtype)

        return layernorm
    if kind == "softmax":
        return lambda t: softmax(t["x"])
    if kind == "mlp":
        layers, act = len(spec.dims) - 1, spec.activation  # type: ignore[union-attr]

        def mlp(t: dict[str, Any]) -> Any:
            h = t["x"]
            for i in range(layers):
                h = jnp.matmul(h, t[f"w{i}"].T)
                if i < layers - 1:
                    h = _act(jax, act, h)
            return h

        return mlp
    raise ValueError(f"no jax function for {kind}")


def _quantize_rows_np(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-12) / 127.0
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8), scale.astype(np.float32)


def jax_int8_function(spec: OpSpec) -> Any:
    """Dynamic int8: ``args = {"x", "layers": [(wq (out,in) int8, w_scale (out,1), bias?)]}``."""
    import jax
    import jax.numpy as jnp

    act = getattr(spec, "activation", "none")
    last_act = spec.kind == "linear"

    def run(args: dict[str, Any]) -> Any:
        h = args["x"]
        n = len(args["layers"])
        for i, (wq, w_scale, bias) in enumerate(args["layers"]):
            x_scale = jnp.maximum(jnp.abs(h).max(axis=1, keepdims=True), 1e-12) / 127.0
            xq = jnp.clip(jnp.round(h / x_scale), -127, 127).astype(jnp.int8)
            acc = jax.lax.dot_general(
                xq, wq, (((1,), (1,)), ((), ())), preferred_element_type=jnp.int32
            )
            h = acc.astype(jnp.float32) * x_scale * w_scale.T
            if bias is not None:
                h = h + bias
            if i < n - 1 or last_act:
                h = _act(jax, act, h)
        return h

    return run


class JaxRuntime(Runtime):
    """JAX execution on one device of ``jax.devices()``."""

    name = "jax"

    def __init__(self, device: str = "cpu", threads: int | None = None) -> None:
        super().__init__()
        configure_xla_threads(threads)
        import jax

        self._jax = jax
        platform, _, index_text = device.partition(":")
        platform = {"cuda": "gpu"}.get(platform, platform)
        index = int(index_text) if index_text else 0
        try:
            devices = jax.devices(platform)
        except RuntimeError as exc:
            hint = (" (plain jax has no CUDA plugin: install switchyard's `gpu` extra, "
                    "pip install -e '.[gpu]')" if platform == "gpu" else "")
            raise RuntimeError(f"jax has no {platform} backend: {exc}{hint}") from None
        if index >= len(devices):
            raise RuntimeError(f"{device!r}: jax sees only {len(devices)} {platform} devices")
        self.jax_device = devices[index]
        self.platform = platform
        self.device = device if platform != "gpu" else f"cuda:{index}"
        if platform == "cpu":
            kind, model = "cpu", machine_arch()
        elif platform == "gpu":
            kind, model = "cuda", accelerator_model(self.jax_device.device_kind)
        else:
            kind, model = platform, accelerator_model(self.jax_device.device_kind)
        self.device_class = device_class_name("jax", kind, model)
        capability = getattr(self.jax_device, "compute_capability", None)
        self.ampere = platform == "gpu" and capability is not None and float(capability) >= 8.0
        self.meter = meter_for(self.device)

    def refusal(self, kind: str, precision: str, mode: str) -> str | None:
        reason = contract_refusal(kind, precision, mode)
        if reason:
            return reason
        if precision == "tf32" and not self.ampere:
            return "tf32 is a tensor-core math mode of NVIDIA Ampere and later GPUs"
        if precision == "fp16" and self.platform == "tpu":
            return "TPUs have no fp16 units (XLA would compute in bf16 or fp32)"
        return None

    def memory(self) -> dict[str, int | None]:
        stats = None
        try:
            stats = self.jax_device.memory_stats()
        except Exception:  # CPU devices raise or return None
            stats = None
        if not stats:
            return super().memory()
        return {
            "device_memory_used_bytes": stats.get("bytes_in_use"),
            "device_memory_total_bytes": stats.get("bytes_limit"),
        }

    def _prepare(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Any:
        jnp = self._jax.numpy
        put = self._jax.device_put
        if variant.precision == "int8":
            f32 = {k: np.asarray(v, dtype=np.float32) for k, v in inputs.items()}
            layers: list[tuple[np.ndarray, np.ndarray | None]]
            if spec.kind == "matmul":
                layers = [(f32["b"].T, None)]
            elif spec.kind == "linear":
                layers = [(f32["weight"], f32.get("bias"))]
            else:
                layers = [(f32[f"w{i}"], None) for i in range(len(spec.dims) - 1)]  # type: ignore[union-attr]
            packed = []
            for w, bias in layers:
                wq, scale = _quantize_rows_np(w)
                packed.append(
                    (
                        put(wq, self.jax_device),
                        put(scale, self.jax_device),
                        None if bias is None else put(bias, self.jax_device),
                    )
                )
            x = f32["a"] if spec.kind == "matmul" else f32["x"]
            return {"x": put(x, self.jax_device), "layers": packed}
        dtype = {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(variant.precision, jnp.float32)
        return {
            k: put(np.asarray(v, dtype=np.float32), self.jax_device).astype(dtype)
            for k, v in inputs.items()
        }

    def _precision_scope(self, variant: Variant) -> Any:
        name = _MATMUL_PRECISION.get(variant.precision)
        if name is None:
            import contextlib

            return contextlib.nullcontext()
        return self._jax.default_matmul_precision(name)

    def _build(self, spec: OpSpec, variant: Variant, args: Any) -> tuple[Any, float | None]:
        fn = jax_int8_function(spec) if variant.precision == "int8" else jax_op_function(spec)
        return self._function(fn, variant, args)

    # --- dynamic batching: jax.vmap of the op's function, eager or compiled -----------------
    def batchable(self, kind: str, precision: str, mode: str) -> bool:
        """Every float variant: the op's function under ``jax.vmap`` over a new leading
        dimension (int8 packs quantized weights per workload: one by one)."""
        return precision != "int8" and self.refusal(kind, precision, mode) is None

    def _build_batch(
        self, spec: OpSpec, variant: Variant, args: Any, size: int
    ) -> tuple[Any, float | None]:
        return self._function(self._jax.vmap(jax_op_function(spec)), variant, args)

    def _function(self, fn: Any, variant: Variant, args: Any) -> tuple[Any, float | None]:
        """``fn`` as the variant runs it: eager in its precision scope, or compiled (timed)."""
        import time

        if variant.mode == "eager":

            def eager(a: Any) -> Any:
                with self._precision_scope(variant):  # a fresh scope per call: single-use
                    return fn(a)

            return eager, None
        start = time.perf_counter_ns()
        with self._precision_scope(variant):
            compiled = self._jax.jit(fn).lower(args).compile()
        return compiled, (time.perf_counter_ns() - start) / 1e6

    def _sync(self, out: Any) -> None:
        out.block_until_ready()

    def _to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out.astype(self._jax.numpy.float32))
