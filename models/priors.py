"""Cold-start priors for the cost models: a roofline device per device class.

A ``sim-<model>`` class runs the simulator over ``models.devices.DEVICE_CATALOG[<model>]``, so
its roofline is nearly the truth and the prior is tight. A live class
(``<runtime>-<kind>-<model>``, e.g. ``torch-cpu-x86``, ``torch-cuda-h200``) gets the catalog
entry of its model when there is one (``h200``, ``a100``, ``tpu-v5e``…) or a generic device
of its kind, with framework dispatch overhead per runtime and wide uncertainty: the prior only
has to rank classes sensibly until the first measurements arrive.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from models.devices import DEVICE_CATALOG, GIGA, DeviceSpec
from models.ops import OpSpec, Variant
from models.opspecs import (
    PRECISIONS,
    AttentionSpec,
    BmmSpec,
    Conv2dSpec,
    LayernormSpec,
    LinearSpec,
    MatmulSpec,
    MlpSpec,
    SoftmaxSpec,
)

__all__ = ["ACTIVATED", "ACTIVATION_OPS", "DISPATCH", "DISPATCH_OP", "LARGE", "OUT_OF_CACHE_OPS",
           "REFERENCE_OPS", "REFERENCE_POINTS", "PriorDevice", "is_rate", "kernel_key",
           "factor_key", "local_cpu_cache_bytes", "parse_device_class", "prior_for_class"]

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
# L1d/L2/L3 bytes when the machine does not say (a current x86 server core) and for
# accelerators (per-SM shared memory/L1, L2 of a datacenter GPU, L2 again: no L3).
DEFAULT_CPU_CACHE_BYTES: tuple[float, float, float] = (32e3, 1e6, 32e6)
ACCELERATOR_CACHE_BYTES: tuple[float, float, float] = (256e3, 50e6, 50e6)
CPU_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# One op of each kind but matmul (whose rate the 256^3 calibration gives), timed by a CPU
# executor when it starts (runtimes/calibrate.py::calibrate_kernels; heartbeats' ``kernel_ms``,
# keyed by the op's signature): 1-10 ms each in fp32 on one core. The roofline misses these
# kinds by up to 100x in either direction, and differently per runtime: on one AMD EPYC the
# live mix's 4096x2048 layernorm took 43 ms in torch, 67 in NumPy and 152 in eager JAX against
# a roofline of 3.4 ms for all three (BENCHMARKS.md, *Cold priors of the live CPU classes*), so every runtime
# looked worth a try and each try of the slow ones stalled the core it shares.
REFERENCE_OPS: dict[str, OpSpec] = {
    "bmm": BmmSpec(b=8, m=128, k=128, n=128),
    # No activation: the kind's factor is its GEMM and bias. With gelu it was mostly NumPy's
    # activation (scipy's erf: 1.6 ms plain, 6.4 with gelu on one AMD EPYC core, torch 2.3
    # either way), which made NumPy's prior 2-4x its time on every linear layer.
    "linear": LinearSpec(batch=256, in_features=512, out_features=512, bias=True),
    "conv2d": Conv2dSpec(batch=2, in_channels=16, out_channels=32, height=32, width=32,
                         kernel=3, stride=1, padding=1),
    "attention": AttentionSpec(batch=1, heads=4, seq_len=256, head_dim=64, causal=True),
    "layernorm": LayernormSpec(rows=2048, dim=2048),
    "softmax": SoftmaxSpec(rows=2048, dim=2048),
    "mlp": MlpSpec(batch=128, dims=(512, 1024, 512), activation="relu"),
}
# The memory-bound kinds again out of the cache: 4096^2 fp32 (64 MB in, as much out: 4x a
# 32 MB L3), timed in fp32 only. At the L3's edge the reference ops above left the live mix's
# 4096x2048 layernorm and softmax 3-5x slower than the prior in torch and JAX (stop 39, bench
# priors): a kind measured at two sizes bends its roofline by a factor interpolated between
# them in ln(bytes moved) (`PriorDevice.kind_factor`). Under the point name ``<kind>.large``.
LARGE = ".large"
OUT_OF_CACHE_OPS: dict[str, OpSpec] = {
    "layernorm": LayernormSpec(rows=4096, dim=4096),
    "softmax": SoftmaxSpec(rows=4096, dim=4096),
}
# The reference linear again with an activation on its output, timed in fp32: its time less
# the plain reference linear's is what the activation costs the runtime per element
# (`PriorDevice.activation_s`), added to every linear and mlp with that activation. Under the
# point name ``linear.<activation>``. relu is one cheap pass everywhere and is not timed.
ACTIVATED = "linear."
ACTIVATION_OPS: dict[str, OpSpec] = {
    "gelu": LinearSpec(batch=256, in_features=512, out_features=512, bias=True,
                       activation="gelu"),
}
# Every measured reference point: its name (a kind, ``<kind>.large`` or
# ``linear.<activation>``) -> its op.
REFERENCE_POINTS: dict[str, OpSpec] = {
    **REFERENCE_OPS, **{kind + LARGE: op for kind, op in OUT_OF_CACHE_OPS.items()},
    **{ACTIVATED + name: op for name, op in ACTIVATION_OPS.items()}}
# And one op too small to do any work, whose time is the runtime's per-call cost (its
# dispatch): an 8^3 eager matmul took 3.9 µs in torch, 3.2 in NumPy and 85 in JAX on one AMD
# EPYC, where the prior had guessed 10, 3 and 30 (`RUNTIME_OVERHEAD_S`). Under the pseudo-kind
# `DISPATCH`.
DISPATCH = "dispatch"
DISPATCH_OP: OpSpec = MatmulSpec(m=8, k=8, n=8)
_REFERENCE_KIND = {**{op.signature(): point for point, op in REFERENCE_POINTS.items()},
                   DISPATCH_OP.signature(): DISPATCH}
# The range a measured per-call cost may set (a longer one is a stall, not dispatch).
DISPATCH_RANGE_S = (1e-6, 1e-2)
# How far a measured kernel may bend its kind's roofline (a factor on the work term): a
# runtime can beat the roofline where it fuses (torch's attention ran at 0.5x here), and a
# measurement far outside this is more likely a stall than the kernel.
KIND_FACTOR_RANGE = (0.05, 1000.0)


def _parse_size(text: str) -> float:
    text = text.strip().upper()
    scale = {"K": 1024.0, "M": 1024.0**2, "G": 1024.0**3}.get(text[-1:], 1.0)
    return float(text.rstrip("KMG")) * scale


@functools.lru_cache(maxsize=1)
def local_cpu_cache_bytes() -> tuple[float, float, float]:
    """L1d, L2 and L3 sizes of this machine's first CPU (sysfs), or the defaults.

    Read where the class's prior is first made (the worker): a CPU class's executors are
    assumed to run on a machine like it; the sizes are stored with the model's prior.
    """
    sizes = dict(zip((1, 2, 3), DEFAULT_CPU_CACHE_BYTES, strict=True))
    try:
        for index in sorted(CPU_CACHE_DIR.glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind in ("Data", "Unified"):
                sizes[int((index / "level").read_text())] = _parse_size(
                    (index / "size").read_text()
                )
    except (OSError, ValueError):
        return DEFAULT_CPU_CACHE_BYTES
    return (sizes[1], sizes[2], sizes[3])


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
    cache_bytes: tuple[float, float, float] = DEFAULT_CPU_CACHE_BYTES
    # (kind, precision, factor, bytes moved): the roofline work of a kind measured on the
    # class's executors (its reference points, models/priors.py::REFERENCE_POINTS) is
    # multiplied by its factor (`kind_factor`); an unmeasured kind by 1. Bytes 0: a factor
    # stored before kinds were measured at two sizes, for every size.
    kind_factors: tuple[tuple[str, str, float, float], ...] = ()
    # (activation, precision, seconds per element): what an activation costs the class's
    # runtime beyond the roofline's nominal FLOP per element (`ACTIVATION_OPS`), added to the
    # work of every op applying it (`OpSpec.activated`); a precision not measured takes fp32's.
    activation_s: tuple[tuple[str, str, float], ...] = ()

    def activation_cost_s(self, activation: str, precision: str) -> float:
        """Seconds per element ``activation`` costs in ``precision`` (0 where unmeasured)."""
        fallback = 0.0
        for name, measured_in, seconds in self.activation_s:
            if name == activation:
                if measured_in == precision:
                    return seconds
                if measured_in == "fp32":
                    fallback = seconds
        return fallback

    def kind_factor(self, kind: str, precision: str, nbytes: float = 0.0) -> float:
        """The factor on ``kind``'s roofline work in ``precision`` for an op moving ``nbytes``
        (1.0 where the kind is unmeasured).

        Measured at one size, that factor; at two, interpolated between them in ln(bytes) and
        held beyond them (a memory-bound kind slows once its data leave the cache). A
        precision measured at fewer sizes than fp32 follows fp32's curve from its own point;
        an unmeasured precision takes fp32's."""
        own = self._points(kind, precision)
        fp32 = own if precision == "fp32" else self._points(kind, "fp32")
        edge = self.cache_bytes[-1]
        if not own:
            return _interpolate(fp32, nbytes, edge) if fp32 else 1.0
        if len(own) > 1 or len(fp32) < 2:
            return _interpolate(own, nbytes, edge)
        at_bytes, factor = own[0]
        return (factor * _interpolate(fp32, nbytes, edge)
                / _interpolate(fp32, at_bytes, edge))

    def _points(self, kind: str, precision: str) -> list[tuple[float, float]]:
        return sorted((b, f) for k, p, f, b in self.kind_factors if k == kind and p == precision)

    def _work_s(self, op: OpSpec, variant: Variant) -> float:
        dev = self.device
        peak = dev.peak_flops.get(variant.precision)
        if peak is None:
            peak = dev.peak_flops.get(self.fallback_precision, min(dev.peak_flops.values()))
        nbytes = op.bytes_moved(variant.precision)
        work = max(op.flops() / peak, nbytes / dev.mem_bw_bytes_s)
        if self.kind_factors:
            work *= self.kind_factor(op.kind, variant.precision, nbytes)
        if self.activation_s:
            activation, elements = op.activated()
            if elements:
                work += elements * self.activation_cost_s(activation, variant.precision)
        return work

    def roofline_log_ms(self, op: OpSpec, variant: Variant) -> float:
        """ln(ms) of the roofline time; a precision the device lacks runs at the fp32 rate
        (emulation or upcast), or the slowest rate the device has."""
        seconds = self.device.launch_overhead_s + self._work_s(op, variant)
        return math.log(max(seconds, 1e-12) * 1e3)

    def work_log_ms(self, op: OpSpec, variant: Variant) -> float:
        """ln(ms) of the roofline time without the per-call overhead (floored at 1 ps)."""
        return math.log(max(self._work_s(op, variant), 1e-15) * 1e3)

    def roofline_and_work_log_ms(self, op: OpSpec, variant: Variant) -> tuple[float, float]:
        """`roofline_log_ms` and `work_log_ms` at the cost of one (FLOPs and bytes are
        computed once: this is the feature cache's miss path)."""
        work = self._work_s(op, variant)
        return (math.log(max(self.device.launch_overhead_s + work, 1e-12) * 1e3),
                math.log(max(work, 1e-15) * 1e3))

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
            "cache_bytes": list(self.cache_bytes),
            "kind_factors": [list(entry) for entry in self.kind_factors],
            "activation_s": [list(entry) for entry in self.activation_s],
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
        # A prior stored before cache sizes were kept gets the defaults.
        caches = data.get("cache_bytes") or DEFAULT_CPU_CACHE_BYTES
        l1, l2, l3 = (float(c) for c in caches)
        return cls(
            dev,
            data["scale"],
            float(data["busy_power_w"]),
            str(data["fallback_precision"]),
            (l1, l2, l3),
            tuple((str(entry[0]), str(entry[1]), float(entry[2]),
                   float(entry[3]) if len(entry) > 3 else 0.0)
                  for entry in data.get("kind_factors") or ()),
            tuple((str(name), str(precision), float(seconds))
                  for name, precision, seconds in data.get("activation_s") or ()),
        )


def _interpolate(points: list[tuple[float, float]], nbytes: float,
                 edge: float | None = None) -> float:
    """The factor at ``nbytes`` from (bytes, factor) points sorted by bytes: linear in
    (ln bytes, ln factor) between them, the nearest one's beyond. Between a point within the
    last-level cache (``edge`` bytes) and one beyond it, the change happens between the edge
    (or the lower point) and twice the edge (or the upper point): an op whose data leave the
    cache slows there, not gradually over the whole span (on one AMD EPYC, 32 MiB L3, the live
    mix's 4096x2048 layernorm and softmax, 67 MB moved, ran at the 4096^2 points' rates,
    1.6-2x what the interpolation from 2048^2 gave: BENCHMARKS.md, *Cold priors*)."""
    if len(points) == 1 or nbytes <= points[0][0]:
        return points[0][1]
    if nbytes >= points[-1][0]:
        return points[-1][1]
    for (b0, f0), (b1, f1) in zip(points, points[1:], strict=False):
        if nbytes <= b1:
            lo, hi = b0, b1
            if edge is not None and edge > 0:
                lo, hi = max(b0, edge), min(b1, 2.0 * edge)
                if hi < lo * 1.01:  # the cache's edge is not within the span
                    lo, hi = b0, b1
            t = min(max(math.log(nbytes / lo) / math.log(hi / lo), 0.0), 1.0)
            return math.exp(math.log(f0) + t * (math.log(f1) - math.log(f0)))
    return points[-1][1]


def is_rate(value: object) -> bool:
    """Whether ``value`` is a usable measured rate: a positive, finite number (not a bool)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def kernel_key(point: str, precision: str) -> str:
    """The key of a measured reference kernel in a class's calibration: ``"<point>/<precision>"``
    (its value: the median ms of ``REFERENCE_POINTS[point]``; a point is a kind, or
    ``<kind>.large``), beside the bare precisions that hold the matmul rates (GFLOP/s). The one
    place this key is built or read."""
    return f"{point}/{precision}"


def factor_key(kind: str, precision: str, nbytes: float) -> str:
    """The `kernel_key` of the reference point a `PriorDevice.kind_factors` entry came from
    (its kind, and the bytes its op moves)."""
    large = OUT_OF_CACHE_OPS.get(kind)
    point = kind + LARGE if large is not None and nbytes == large.bytes_moved(precision) else kind
    return kernel_key(point, precision)


def reference_kind(signature: str) -> str | None:
    """The reference point of an op's signature (a heartbeat's ``kernel_ms`` key: a kind,
    ``<kind>.large`` or `DISPATCH`); None for an op that is not one of today's
    `REFERENCE_POINTS` (an executor of another version)."""
    return _REFERENCE_KIND.get(signature)


def _split_calibration(calibration: Mapping[str, float]
                       ) -> tuple[dict[str, float], dict[tuple[str, str], float], float | None]:
    """(matmul GFLOP/s by precision, reference-kernel ms by (kind, precision), the per-call
    op's fp32 ms or None); unusable values are dropped."""
    rates: dict[str, float] = {}
    kernels: dict[tuple[str, str], float] = {}
    dispatch_ms = None
    for key, value in calibration.items():
        if not is_rate(value):
            continue
        kind, slash, precision = str(key).partition("/")
        if slash and kind in REFERENCE_POINTS:
            kernels[(kind, precision)] = float(value)
        elif slash and kind == DISPATCH and precision == "fp32":
            dispatch_ms = float(value)
        elif not slash:
            rates[kind] = float(value)
    return rates, kernels, dispatch_ms


def _kind_factors(device: DeviceSpec, cache_bytes: tuple[float, float, float],
                  kernels: Mapping[tuple[str, str], float],
                  ) -> tuple[tuple[str, str, float, float], ...]:
    """Per (reference point, precision): (its kind, the precision, measured work ÷ roofline
    work of the point's op, the bytes that op moves)."""
    plain = PriorDevice(device, "live", 0.0, cache_bytes=cache_bytes)
    low, high = KIND_FACTOR_RANGE
    factors = []
    for (point, precision), ms in sorted(kernels.items()):
        if precision not in PRECISIONS or point.startswith(ACTIVATED):
            continue
        op = REFERENCE_POINTS[point]
        work_s = plain._work_s(op, Variant(precision, "eager"))
        # The call overhead is the roofline's own term: what is left of the measurement is work.
        measured_s = max(ms / 1e3 - device.launch_overhead_s, ms / 1e3 / 2)
        if work_s > 0:
            factors.append((op.kind, precision, min(max(measured_s / work_s, low), high),
                            float(op.bytes_moved(precision))))
    return tuple(factors)


def _activation_s(kernels: Mapping[tuple[str, str], float]) -> tuple[tuple[str, str, float], ...]:
    """Per activation point and precision: (the activation, the precision, seconds per element
    it added to the plain reference linear of that precision), where both were measured (a
    negative difference, noise around a free activation, counts as 0)."""
    out = []
    for (point, precision), ms in sorted(kernels.items()):
        if not point.startswith(ACTIVATED) or precision not in PRECISIONS:
            continue
        op = REFERENCE_POINTS[point]
        plain_ms = kernels.get((op.kind, precision))  # the same op without the activation
        activation, elements = op.activated()
        if plain_ms is None or not elements:
            continue
        out.append((activation, precision, max(0.0, ms - plain_ms) / 1e3 / elements))
    return tuple(out)


def prior_for_class(device_class: str,
                    calibration: Mapping[str, float] | None = None) -> PriorDevice:
    """The prior device of a class name; never fails (unknown names get a generic CPU).

    ``calibration``: what the class's executors measured when they started
    (runtimes/calibrate.py): the matmul GFLOP/s per precision (heartbeats' ``calibration``),
    and the ms of each kind's reference op per precision under `kernel_key` (heartbeats'
    ``kernel_ms``). A live CPU class's prior then runs each measured precision at its measured
    rate instead of the generic CPU's guesses (on one AMD EPYC torch's bf16 matmul ran at 2 %
    of its fp32 rate, JAX's at 175 %; the generic CPU says 50 % for both), and bends each
    measured kind's work by how far its reference op missed that roofline
    (`PriorDevice.kind_factors`), and its per-call overhead is the measured time of
    `DISPATCH_OP` (fp32) instead of the runtime's guess. Ignored for other classes and
    non-positive values."""
    runtime, kind, model = parse_device_class(device_class)
    if runtime == "sim":
        spec = DEVICE_CATALOG.get(model)
        if spec is not None:
            # The simulator charges TDP while busy (models.devices.roofline_energy_j).
            caches = DEFAULT_CPU_CACHE_BYTES if spec.kind == "cpu" else ACCELERATOR_CACHE_BYTES
            return PriorDevice(spec, "sim", spec.tdp_w, cache_bytes=caches)
        return PriorDevice(
            GENERIC_CPU,
            "live",
            GENERIC_CPU.tdp_w * LIVE_POWER_FRACTION,
            cache_bytes=local_cpu_cache_bytes(),
        )
    overhead = RUNTIME_OVERHEAD_S.get(runtime, 10e-6)
    caches = local_cpu_cache_bytes()
    if kind == "cpu" or kind not in GENERIC_BY_KIND:
        spec = GENERIC_CPU
    else:
        caches = ACCELERATOR_CACHE_BYTES
        spec = DEVICE_CATALOG.get(model) or DEVICE_CATALOG[GENERIC_BY_KIND[kind]]
        # An accelerator op pays the framework dispatch *and* the kernel launch.
        overhead += spec.launch_overhead_s
    peaks = dict(spec.peak_flops)
    name = f"{device_class}~{spec.name}"
    rates, kernels, dispatch_ms = (_split_calibration(calibration or {})
                                   if spec is GENERIC_CPU else ({}, {}, None))
    if rates or kernels or dispatch_ms is not None:
        peaks.update({p: r * GIGA for p, r in rates.items()})
        name += "~calibrated"
    if dispatch_ms is not None:
        low, high = DISPATCH_RANGE_S
        overhead = min(max(dispatch_ms / 1e3, low), high)
    live = DeviceSpec(
        name,
        spec.kind,
        peaks,
        spec.mem_bw_bytes_s,
        overhead,
        spec.tdp_w,
        spec.idle_w,
    )
    return PriorDevice(live, "live", spec.tdp_w * LIVE_POWER_FRACTION, cache_bytes=caches,
                       kind_factors=_kind_factors(live, caches, kernels),
                       activation_s=_activation_s(kernels))
