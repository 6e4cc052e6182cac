"""Device catalog from published figures, and the roofline model the ``sim`` runtime sleeps by.

Peak figures are dense (no 2:4 sparsity) tensor-core rates for tf32/bf16/fp16/int8 and the
vector (CUDA-core) rate for fp32, as printed in the vendors' datasheets cited per entry.
Launch overheads and idle powers are not datasheet figures: they are typical magnitudes
(per-op framework dispatch plus kernel launch; idle draw as reported by nvidia-smi /
tegrastats) and only feed the simulator, which labels everything it reports as simulated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from models.ops import OpSpec, Variant

DeviceKind = Literal["gpu", "tpu", "cpu", "edge"]
TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class DeviceSpec:
    """Published capabilities of one device model."""

    name: str
    kind: DeviceKind
    peak_flops: dict[str, float] = field(hash=False)  # precision -> FLOP/s (int8: OP/s)
    mem_bw_bytes_s: float
    launch_overhead_s: float
    tdp_w: float
    idle_w: float

    def supports(self, precision: str) -> bool:
        """Whether the device has a native rate for ``precision``."""
        return precision in self.peak_flops


DEVICE_CATALOG: dict[str, DeviceSpec] = {
    spec.name: spec
    for spec in (
        # NVIDIA H100 Tensor Core GPU datasheet, SXM5 column: FP32 67 TF, TF32 494.5 TF,
        # BF16/FP16 989.5 TF, INT8 1979 TOPS (dense = half the "with sparsity" figures),
        # HBM3 3.35 TB/s, max TDP 700 W.
        DeviceSpec(
            "h100",
            "gpu",
            {
                "fp32": 67 * TERA,
                "tf32": 494.5 * TERA,
                "bf16": 989.5 * TERA,
                "fp16": 989.5 * TERA,
                "int8": 1979 * TERA,
            },
            3.35e12,
            8e-6,
            700.0,
            70.0,
        ),
        # NVIDIA H200 datasheet (SXM): same Hopper compute as H100 SXM, HBM3e 4.8 TB/s, 700 W.
        DeviceSpec(
            "h200",
            "gpu",
            {
                "fp32": 67 * TERA,
                "tf32": 494.5 * TERA,
                "bf16": 989.5 * TERA,
                "fp16": 989.5 * TERA,
                "int8": 1979 * TERA,
            },
            4.8e12,
            8e-6,
            700.0,
            75.0,
        ),
        # NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM: FP32 19.5 TF, TF32 156 TF,
        # BF16/FP16 312 TF, INT8 624 TOPS, HBM2e 2,039 GB/s, 400 W.
        DeviceSpec(
            "a100",
            "gpu",
            {
                "fp32": 19.5 * TERA,
                "tf32": 156 * TERA,
                "bf16": 312 * TERA,
                "fp16": 312 * TERA,
                "int8": 624 * TERA,
            },
            2.039e12,
            8e-6,
            400.0,
            55.0,
        ),
        # NVIDIA L4 datasheet: FP32 30.3 TF, TF32 60 TF, BF16/FP16 121 TF, INT8 242.5 TOPS
        # (dense), GDDR6 300 GB/s, 72 W.
        DeviceSpec(
            "l4",
            "gpu",
            {
                "fp32": 30.3 * TERA,
                "tf32": 60 * TERA,
                "bf16": 121 * TERA,
                "fp16": 121 * TERA,
                "int8": 242.5 * TERA,
            },
            300e9,
            8e-6,
            72.0,
            16.0,
        ),
        # Google Cloud TPU v5e docs: 197 TF bf16, 394 TOPS int8, HBM2 819 GB/s per chip.
        # No fp16/tf32 units. fp32 matmuls at HIGHEST precision are emulated with 6 bf16
        # passes, hence 197/6. Google publishes no per-chip TDP; 200 W is an assumption.
        DeviceSpec(
            "tpu-v5e",
            "tpu",
            {"fp32": 197 / 6 * TERA, "bf16": 197 * TERA, "int8": 394 * TERA},
            819e9,
            25e-6,
            200.0,
            40.0,
        ),
        # NVIDIA Jetson AGX Orin 64GB technical brief: Ampere GPU 5.3 TF FP32, 170 sparse
        # INT8 TOPS (85 dense; FP16/BF16 tensor half of that, TF32 a quarter), LPDDR5
        # 204.8 GB/s, module power 15-60 W.
        DeviceSpec(
            "jetson-orin",
            "edge",
            {
                "fp32": 5.3 * TERA,
                "tf32": 21.25 * TERA,
                "bf16": 42.5 * TERA,
                "fp16": 42.5 * TERA,
                "int8": 85 * TERA,
            },
            204.8e9,
            20e-6,
            60.0,
            8.0,
        ),
        # NVIDIA Jetson Nano module datasheet: 128-core Maxwell GPU, 472 GFLOPS FP16 (Maxwell
        # runs FP32 at half that: 236 GF), 4 GB LPDDR4 25.6 GB/s, 5 W / 10 W modes. No
        # tensor cores: no tf32/bf16/int8 rate.
        DeviceSpec(
            "jetson-nano",
            "edge",
            {"fp32": 236 * GIGA, "fp16": 472 * GIGA},
            25.6e9,
            20e-6,
            10.0,
            2.0,
        ),
        # One modern x86 core (Sapphire Rapids class, 3.0 GHz): 2 AVX-512 FMA ports x 16 fp32
        # lanes x 2 FLOP = 192 GF fp32; AVX512-BF16 doubles it; VNNI int8 4x. About 15 GB/s of
        # DRAM bandwidth per core and ~6 W per core at load (350 W / 56 cores) are derived.
        DeviceSpec(
            "cpu-core",
            "cpu",
            {"fp32": 192 * GIGA, "bf16": 384 * GIGA, "int8": 768 * GIGA},
            15e9,
            2e-6,
            6.0,
            1.0,
        ),
    )
}


def _check(dev: DeviceSpec, variant: Variant) -> None:
    if not dev.supports(variant.precision):
        raise ValueError(f"{dev.name} has no {variant.precision} rate in the catalog")


def roofline_seconds(dev: DeviceSpec, op: OpSpec, variant: Variant) -> float:
    """Launch overhead + max(compute time, memory time) of ``op`` at ``variant`` on ``dev``.

    Non-GEMM ops (softmax, layernorm) are memory-bound at any realistic size, so using the
    tensor-core peak for them changes nothing measurable. Raises ValueError for a precision the
    device lacks.
    """
    _check(dev, variant)
    compute_s = op.flops() / dev.peak_flops[variant.precision]
    memory_s = op.bytes_moved(variant.precision) / dev.mem_bw_bytes_s
    return dev.launch_overhead_s + max(compute_s, memory_s)


def roofline_energy_j(dev: DeviceSpec, op: OpSpec, variant: Variant) -> float:
    """Model energy for the simulator only: idle power during launch, TDP while busy.

    Never report this as a measurement.
    """
    _check(dev, variant)
    busy_s = roofline_seconds(dev, op, variant) - dev.launch_overhead_s
    return dev.idle_w * dev.launch_overhead_s + dev.tdp_w * busy_s


def modelled_energy_j(dev: DeviceSpec, busy_ms: float) -> float:
    """Energy of ``busy_ms`` of execution on ``dev`` from its published power: idle power over
    the launch overhead, peak (TDP) power for the rest. A model, never a measurement: every
    record carrying it says ``energy_simulated``."""
    busy_s = max(0.0, float(busy_ms)) / 1e3
    launch_s = min(busy_s, dev.launch_overhead_s)
    return dev.idle_w * launch_s + dev.tdp_w * (busy_s - launch_s)
