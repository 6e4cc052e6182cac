"""PyTorch runtime on ``cpu`` or ``cuda:N``.

Variants: fp32 (IEEE fp32 matmuls: TF32 explicitly off); tf32 (CUDA, Ampere and later);
bf16; fp16; int8 by dynamic quantization for linear/matmul/mlp (CPU: ``quantize_dynamic``
with fbgemm/x86 kernels, per-tensor weights; CUDA: ``torch._int_mm`` int8 x int8 -> int32 with
per-row activation and per-channel weight scales, operands zero-padded to the kernel's
alignment, which leaves the product exact); modes eager and compiled (``torch.compile``;
on CPU only when ``compile_cpu`` is set, because inductor builds C++ per shape: ~3 s measured
for one 64x64 matmul on this class of machine, longer than most workloads run).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
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
from runtimes.energy import NvmlMeter, meter_for, nvml_index

logger = logging.getLogger(__name__)


def _torch() -> Any:
    import torch

    return torch


def _activation(torch: Any, name: str, y: Any) -> Any:
    F = torch.nn.functional
    if name == "relu":
        return F.relu(y)
    if name == "gelu":
        return F.gelu(y, approximate="none")  # the contract's exact erf form
    if name == "tanh":
        return torch.tanh(y)
    if name == "silu":
        return F.silu(y)
    return y


def op_function(spec: OpSpec) -> Any:
    """A function ``f(tensors: dict) -> tensor`` with the contract's semantics for ``spec``."""
    torch = _torch()
    F = torch.nn.functional
    kind = spec.kind
    if kind in ("matmul", "bmm"):
        return lambda t: torch.matmul(t["a"], t["b"])
    if kind == "linear":
        act = spec.activation  # type: ignore[union-attr]
        return lambda t: _activation(torch, act, F.linear(t["x"], t["weight"], t.get("bias")))
    if kind == "conv2d":
        stride, padding = spec.stride, spec.padding  # type: ignore[union-attr]
        return lambda t: F.conv2d(t["x"], t["weight"], stride=stride, padding=padding)
    if kind == "attention":
        causal = spec.causal  # type: ignore[union-attr]
        return lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=causal)
    if kind == "layernorm":
        dim = spec.dim  # type: ignore[union-attr]
        return lambda t: F.layer_norm(t["x"], (dim,), eps=1e-5)
    if kind == "softmax":
        return lambda t: torch.softmax(t["x"], dim=-1)
    if kind == "mlp":
        layers, act = len(spec.dims) - 1, spec.activation  # type: ignore[union-attr]

        def mlp(t: dict[str, Any]) -> Any:
            h = t["x"]
            for i in range(layers):
                h = F.linear(h, t[f"w{i}"])
                if i < layers - 1:
                    h = _activation(torch, act, h)
            return h

        return mlp
    raise ValueError(f"no torch function for {kind}")


def batched_function(spec: OpSpec) -> Any:
    """``op_function(spec)`` over inputs stacked along a new leading dimension: attention,
    whose batch rows are independent, folds that dimension into its batch (vmap has no batching
    rule for CPU flash attention and would loop); every other kind is ``torch.func.vmap``'d (a
    matmul becomes one bmm, a linear one batched GEMM with per-workload weights)."""
    torch = _torch()
    fn = op_function(spec)
    if spec.kind == "attention":
        def attention(t: dict[str, Any]) -> Any:
            size = t["q"].shape[0]
            out = fn({name: x.flatten(0, 1) for name, x in t.items()})
            return out.unflatten(0, (size, -1))

        return attention
    return torch.func.vmap(fn)


def _gemm_operands(spec: OpSpec, t: dict[str, Any]) -> list[tuple[Any, Any | None]]:
    """(weight (out, in), bias) per GEMM layer, in order, for the int8 paths."""
    if spec.kind == "matmul":
        return [(t["b"].T.contiguous(), None)]
    if spec.kind == "linear":
        return [(t["weight"], t.get("bias"))]
    return [(t[f"w{i}"], None) for i in range(len(spec.dims) - 1)]  # type: ignore[union-attr]


def _pad_to(x: Any, rows: int, cols: int) -> Any:
    torch = _torch()
    if x.shape == (rows, cols):
        return x.contiguous()
    out = torch.zeros((rows, cols), dtype=x.dtype, device=x.device)
    out[: x.shape[0], : x.shape[1]] = x
    return out


def _round_up(n: int, multiple: int, minimum: int) -> int:
    return max(minimum, -(-n // multiple) * multiple)


def _quantize_rows(x: Any) -> tuple[Any, Any]:
    """Symmetric per-row int8 quantization: (int8 values, float32 scale per row)."""
    torch = _torch()
    scale = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
    return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8), scale


class TorchRuntime(Runtime):
    """PyTorch eager/compiled execution on one device."""

    name = "torch"

    def __init__(
        self,
        device: str = "cpu",
        threads: int | None = None,
        compile_cpu: bool = False,
        int8_impl: str | None = None,
    ) -> None:
        super().__init__()
        torch = _torch()
        if threads is not None:
            torch.set_num_threads(threads)
            # Only allowed before the first parallel op; later runtimes in a process keep it.
            with contextlib.suppress(RuntimeError):
                torch.set_num_interop_threads(1)
        self.device = device
        self.compile_cpu = compile_cpu
        self.capability: tuple[int, int] | None = None
        if device == "cpu":
            model = machine_arch()
            kind = "cpu"
        elif device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise RuntimeError(f"torch sees no CUDA device for {device!r}")
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            if index >= torch.cuda.device_count():
                raise RuntimeError(f"{device!r}: only {torch.cuda.device_count()} CUDA devices")
            self.device = f"cuda:{index}"
            self.capability = torch.cuda.get_device_capability(index)
            model, kind = accelerator_model(torch.cuda.get_device_name(index)), "cuda"
        else:
            raise RuntimeError(f"torch runtime supports cpu and cuda:N, not {device!r}")
        self.device_class = device_class_name("torch", kind, model)
        self.meter = meter_for(self.device)
        # CPU: fbgemm dynamic quantization; CUDA has no quantized-linear kernels, so _int_mm.
        self.int8_impl = int8_impl or ("fbgemm" if device == "cpu" else "int_mm")

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def refusal(self, kind: str, precision: str, mode: str) -> str | None:
        reason = contract_refusal(kind, precision, mode)
        if reason:
            return reason
        ampere = self.capability is not None and self.capability >= (8, 0)
        if precision == "tf32" and not ampere:
            return "tf32 is a tensor-core math mode of NVIDIA Ampere and later GPUs"
        if precision == "bf16" and self.is_cuda and not ampere:
            return "bf16 needs an Ampere or later GPU"
        if mode == "compiled":
            if precision == "int8":
                return "int8 dynamic quantization runs eagerly; torch.compile does not lower it"
            if not self.is_cuda and not self.compile_cpu:
                return (
                    "torch.compile on CPU builds C++ per shape (seconds each); "
                    "enable it with SWITCHYARD_TORCH_COMPILE_CPU=1 (the torch_compile_cpu setting)"
                )
        return None

    def memory(self) -> dict[str, int | None]:
        if not self.is_cuda:
            return super().memory()
        torch = _torch()
        free, total = torch.cuda.mem_get_info(self.device)
        return {
            "device_memory_used_bytes": int(total - free),
            "device_memory_total_bytes": int(total),
        }

    def power_meter(self) -> NvmlMeter | None:
        """NVML handle for heartbeat power/memory on CUDA devices."""
        if not self.is_cuda:
            return None
        return NvmlMeter(nvml_index(int(self.device.split(":")[1])))

    def _set_fp32_math(self, precision: str) -> None:
        """fp32 means IEEE fp32; tf32 lets cuBLAS/cuDNN round multiplies to tf32."""
        if not self.is_cuda:
            return
        torch = _torch()
        mode = "tf32" if precision == "tf32" else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode

    def _prepare(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Any:
        torch = _torch()
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
            variant.precision, torch.float32
        )
        t = {
            name: torch.from_numpy(np.ascontiguousarray(arr)).to(device=self.device, dtype=dtype)
            for name, arr in inputs.items()
        }
        self._set_fp32_math(variant.precision)
        if variant.precision != "int8":
            return t
        layers = _gemm_operands(spec, t)
        x = t["a"] if spec.kind == "matmul" else t["x"]
        if self.int8_impl == "fbgemm":
            with warnings.catch_warnings():
                # torch.ao.quantization is deprecated in favour of torchao, which is not a
                # dependency; the fbgemm dynamic-quantized linear it builds is still current.
                warnings.simplefilter("ignore")
                modules = []
                for weight, bias in layers:
                    lin = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
                    with torch.no_grad():
                        lin.weight.copy_(weight)
                        if bias is not None:
                            lin.bias.copy_(bias)
                    q = torch.ao.quantization.quantize_dynamic(
                        torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8
                    )
                    modules.append(q)
            return {"x": x, "layers": modules}
        packed = []
        for weight, bias in layers:
            wq, w_scale = _quantize_rows(weight)  # per output channel
            k_pad = _round_up(weight.shape[1], 16, 16)
            n_pad = _round_up(weight.shape[0], 16, 16)
            packed.append((_pad_to(wq, n_pad, k_pad).T.contiguous(), w_scale.T, bias, weight.shape))
        return {"x": x, "layers": packed}

    def _build(self, spec: OpSpec, variant: Variant, args: Any) -> tuple[Any, float | None]:
        torch = _torch()
        if variant.precision == "int8":
            return self._int8_function(spec), None
        fn = op_function(spec)
        if variant.mode == "eager":
            return fn, None
        compiled = torch.compile(fn, dynamic=False, fullgraph=True)
        import time

        start = time.perf_counter_ns()
        self._sync(compiled(args))  # torch.compile is lazy: the first call compiles (and runs)
        return compiled, (time.perf_counter_ns() - start) / 1e6

    def _int8_function(self, spec: OpSpec) -> Any:
        torch = _torch()
        act = getattr(spec, "activation", "none")
        last_act = spec.kind == "linear"  # linear applies act after its only layer; mlp not

        def fbgemm(args: dict[str, Any]) -> Any:
            h = args["x"]
            n = len(args["layers"])
            for i, module in enumerate(args["layers"]):
                h = module(h)
                if i < n - 1 or last_act:
                    h = _activation(torch, act, h)
            return h

        def int_mm(args: dict[str, Any]) -> Any:
            h = args["x"]
            n = len(args["layers"])
            for i, (wq_t, w_scale, bias, (out_f, _in_f)) in enumerate(args["layers"]):
                xq, x_scale = _quantize_rows(h)
                rows = _round_up(h.shape[0], 16, 32)  # _int_mm needs > 16 rows, 8-aligned dims
                acc = torch._int_mm(_pad_to(xq, rows, wq_t.shape[0]), wq_t)
                h = acc[: h.shape[0], :out_f].to(torch.float32) * x_scale * w_scale
                if bias is not None:
                    h = h + bias
                if i < n - 1 or last_act:
                    h = _activation(torch, act, h)
            return h

        return fbgemm if self.int8_impl == "fbgemm" else int_mm

    def execute(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Any:
        """As :meth:`Runtime.execute`, without autograd bookkeeping; CUDA OOM -> MemoryError."""
        torch = _torch()
        try:
            with torch.inference_mode():
                return super().execute(spec, variant, inputs)
        except torch.OutOfMemoryError as exc:
            # Free the cached blocks the failed op left, so the next workload can run.
            torch.cuda.empty_cache()
            raise MemoryError(str(exc).splitlines()[0]) from None

    # --- dynamic batching ------------------------------------------------------------------
    def batchable(self, kind: str, precision: str, mode: str) -> bool:
        """Eager float variants of every kind: the op's function mapped over a new leading
        dimension by ``torch.func.vmap`` (a matmul becomes one bmm). int8 packs a quantized
        module per weight and compiled mode builds per shape: those run one by one."""
        return (mode == "eager" and precision in ("fp32", "tf32", "bf16", "fp16")
                and self.refusal(kind, precision, mode) is None)

    def _build_batch(
        self, spec: OpSpec, variant: Variant, args: Any, size: int
    ) -> tuple[Any, float | None]:
        return batched_function(spec), None

    def execute_batch(
        self, spec: OpSpec, variant: Variant, inputs: list[dict[str, np.ndarray]]
    ) -> list[Any]:
        """As :meth:`Runtime.execute_batch`, without autograd; CUDA OOM -> MemoryError."""
        torch = _torch()
        try:
            with torch.inference_mode():
                return super().execute_batch(spec, variant, inputs)
        except torch.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            raise MemoryError(str(exc).splitlines()[0]) from None

    def _sync(self, out: Any) -> None:
        if self.is_cuda:
            _torch().cuda.synchronize(self.device)

    def _to_numpy(self, out: Any) -> np.ndarray:
        return out.detach().to("cpu", dtype=_torch().float32).numpy()

    def close(self) -> None:
        super().close()
        if self.is_cuda:
            _torch().cuda.empty_cache()
