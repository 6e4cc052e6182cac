"""Cold-start priors for the cost models: a roofline device per device class.

A ``sim-<model>`` class runs the simulator over ``models.devices.DEVICE_CATALOG[<model>]``, so
its roofline is nearly the truth and the prior is tight. A live class
(``<runtime>-<kind>-<model>``, e.g. ``torch-cpu-x86``, ``torch-cuda-h200``) gets the catalog
entry of its model when there is one (``h200``, ``a100``, ``tpu-v5e``…) or a generic device
of its kind, with framework dispatch overhead per runtime and wide uncertainty: the prior only
has to rank classes sensibly until the first measurements arrive.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from models.devices import DEVICE_CATALOG, GIGA, DeviceSpec
from models.ops import OpSpec, Variant

__all__ = ["PriorDevice", "prior_for_class", "parse_device_class"]

PriorScale = Literal["sim", "live"]

# A generic host CPU as one runtime process sees it (all its threads): ~100 GF/s fp32 and
# ~20 GB/s were measured with NumPy on the 2-core development VM (AMD EPYC); bf16 is usually
# emulated on CPUs without AMX (slower than fp32), int8 via VNNI about 2x fp32.
GENERIC_CPU = DeviceSpec(
    "generic-cpu",
    "cpu",
    {"fp32": 100 * GIGA, "bf16": 50 * GIGA, "int8": 200 * GIGA},
    20e9,
    5e-6,
    65.0,
    10.0,
)
# Per-op dispatch overhead of each runtime's eager path (typical magnitudes: NumPy calls a BLAS
# routine directly; torch eager goes through the dispatcher; jax eager dispatches a cached XLA
# executable per op, tens of µs).
RUNTIME_OVERHEAD_S: dict[str, float] = {"numpy": 3e-6, "torch": 10e-6, "jax": 30e-6}
# Catalog entries standing in for live accelerators whose model is not in the catalog.
GENERIC_BY_KIND: dict[str, str] = {
    "cuda": "a100",
    "gpu": "a100",
    "tpu": "tpu-v5e",
    "edge": "jetson-orin",
}
# Average power while busy as a fraction of TDP, for the energy prior of live devices
# (sustained kernels rarely sit at TDP; 0.6 is a typical nvidia-smi reading under load).
LIVE_POWER_FRACTION = 0.6


def parse_device_class(device_class: str) -> tuple[str, str, str]:
    """``"<runtime>-<kind>-<model>"`` -> (runtime, kind, model); ``sim-h100`` -> (sim, "", h100).

    The model may itself contain dashes (``sim-tpu-v5e``, ``jax-tpu-v5e``).
    """
    parts = device_class.split("-")
    if parts[0] == "sim":
        return "sim", "", "-".join(parts[1:])
    if len(parts) >= 3:
        return parts[0], parts[1], "-".join(parts[2:])
    if len(parts) == 2:
        return parts[0], parts[1], ""
    return parts[0], "", ""


@dataclass(frozen=True)
class PriorDevice:
    """The roofline device behind a class's prior, plus how much to trust it."""

    device: DeviceSpec
    scale: PriorScale
    busy_power_w: float
    fallback_precision: str = "fp32"

    def roofline_log_ms(self, op: OpSpec, variant: Variant) -> float:
        """ln(ms) of the roofline time; a precision the device lacks runs at the fp32 rate
        (emulation or upcast), or the slowest rate the device has."""
        dev = self.device
        peak = dev.peak_flops.get(variant.precision)
        if peak is None:
            peak = dev.peak_flops.get(self.fallback_precision, min(dev.peak_flops.values()))
        seconds = dev.launch_overhead_s + max(
            op.flops() / peak, op.bytes_moved(variant.precision) / dev.mem_bw_bytes_s
        )
        return math.log(max(seconds, 1e-12) * 1e3)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the device figures themselves, so a stored model keeps its prior)."""
        dev = self.device
        return {
            "name": dev.name,
            "kind": dev.kind,
            "peak_flops": dict(dev.peak_flops),
            "mem_bw_bytes_s": dev.mem_bw_bytes_s,
            "launch_overhead_s": dev.launch_overhead_s,
            "tdp_w": dev.tdp_w,
            "idle_w": dev.idle_w,
            "scale": self.scale,
            "busy_power_w": self.busy_power_w,
            "fallback_precision": self.fallback_precision,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PriorDevice:
        """Rebuild from `to_dict` output."""
        dev = DeviceSpec(
            str(data["name"]),
            data["kind"],
            {k: float(v) for k, v in data["peak_flops"].items()},
            float(data["mem_bw_bytes_s"]),
            float(data["launch_overhead_s"]),
            float(data["tdp_w"]),
            float(data["idle_w"]),
        )
        return cls(dev, data["scale"], float(data["busy_power_w"]), str(data["fallback_precision"]))


def prior_for_class(device_class: str) -> PriorDevice:
    """The prior device of a class name; never fails (unknown names get a generic CPU)."""
    runtime, kind, model = parse_device_class(device_class)
    if runtime == "sim":
        spec = DEVICE_CATALOG.get(model)
        if spec is not None:
            # The simulator charges TDP while busy (models.devices.roofline_energy_j).
            return PriorDevice(spec, "sim", spec.tdp_w)
        return PriorDevice(GENERIC_CPU, "live", GENERIC_CPU.tdp_w * LIVE_POWER_FRACTION)
    overhead = RUNTIME_OVERHEAD_S.get(runtime, 10e-6)
    if kind == "cpu" or kind not in GENERIC_BY_KIND:
        spec = GENERIC_CPU
    else:
        spec = DEVICE_CATALOG.get(model) or DEVICE_CATALOG[GENERIC_BY_KIND[kind]]
        # An accelerator op pays the framework dispatch *and* the kernel launch.
        overhead += spec.launch_overhead_s
    live = DeviceSpec(
        f"{device_class}~{spec.name}",
        spec.kind,
        dict(spec.peak_flops),
        spec.mem_bw_bytes_s,
        overhead,
        spec.tdp_w,
        spec.idle_w,
    )
    return PriorDevice(live, "live", spec.tdp_w * LIVE_POWER_FRACTION)
