"""NumPy runtime: the CPU reference runtime, fp32 eager only.

It runs the same kernels as the float64 reference (``models.kernels``) in float32, on the
BLAS NumPy links against. Everything else is refused rather than emulated: NumPy has no
bf16 dtype, no tensor cores (tf32), no half-precision BLAS (fp16 matmuls fall back to slow
loops whose accumulation NumPy does not document), no dynamic-quantization kernels (int8)
and no compiler.

Dynamic batching: the kernels of matmul, bmm, attention, layernorm and softmax broadcast over
leading dimensions (``@`` and last-axis reductions), so workloads of one shape stacked along a
new leading dimension run as one call of the same kernel. linear, mlp (``w.T`` of a stacked
weight is not its transpose) and conv2d (an einsum over fixed axes) run one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.ops import OpSpec, Variant, evaluate
from runtimes.base import Runtime, contract_refusal, device_class_name, machine_arch
from runtimes.energy import meter_for

# The kinds whose float64-reference kernel broadcasts over a leading batch dimension.
BATCHED_KINDS = frozenset({"matmul", "bmm", "attention", "layernorm", "softmax"})

_REFUSED = {
    "tf32": "tf32 is an NVIDIA tensor-core mode; NumPy runs on the CPU",
    "bf16": "NumPy has no bfloat16 dtype",
    "fp16": "NumPy has no half-precision BLAS; fp16 would be emulated, not a real variant",
    "int8": "NumPy has no dynamic-quantization kernels",
}


class NumpyRuntime(Runtime):
    """fp32 NumPy/BLAS on the host CPU."""

    name = "numpy"

    def __init__(self, device: str = "cpu", threads: int | None = None) -> None:
        super().__init__()
        if device != "cpu":
            raise RuntimeError(f"numpy runtime runs on cpu only, not {device!r}")
        self.device = "cpu"
        self.device_class = device_class_name("numpy", "cpu", machine_arch())
        self.meter = meter_for("cpu")
        self._limits: Any = None
        if threads is not None:
            from threadpoolctl import threadpool_limits

            # Kept for the runtime's lifetime: limits BLAS/OpenMP pools process-wide.
            self._limits = threadpool_limits(limits=threads)

    def refusal(self, kind: str, precision: str, mode: str) -> str | None:
        reason = contract_refusal(kind, precision, mode)
        if reason:
            return reason
        if precision in _REFUSED:
            return _REFUSED[precision]
        if mode == "compiled":
            return "NumPy has no compiler; only eager runs"
        return None

    def _prepare(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Any:
        return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in inputs.items()}

    def _build(self, spec: OpSpec, variant: Variant, args: Any) -> tuple[Any, float | None]:
        return (lambda a: evaluate(spec, a, np.float32)), None

    def _sync(self, out: Any) -> None:
        return None  # NumPy is synchronous

    def _to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out, dtype=np.float32)

    def batchable(self, kind: str, precision: str, mode: str) -> bool:
        return kind in BATCHED_KINDS and self.refusal(kind, precision, mode) is None

    def _prepare_batch(
        self, spec: OpSpec, variant: Variant, inputs: list[dict[str, np.ndarray]]
    ) -> Any:
        return {name: np.stack([np.asarray(one[name], dtype=np.float32) for one in inputs])
                for name in inputs[0]}

    def _build_batch(
        self, spec: OpSpec, variant: Variant, args: Any, size: int
    ) -> tuple[Any, float | None]:
        return (lambda a: evaluate(spec, a, np.float32)), None
