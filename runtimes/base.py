"""The runtime contract every executor backend implements, and the honest timing loop.

What ``exec_ms`` covers, for every runtime: one run of the op on inputs already resident on the
device in the variant's storage format, from ``perf_counter_ns`` before the call to after the
device is synchronised. Excluded (and never reported as execution): host-to-device transfer,
casting inputs to the variant's dtype, packing int8 weights, copying the output back, and
compilation, which is timed separately as ``compile_ms`` on the first run of a new
(shape, variant). Every new (shape, variant) gets one untimed warm-up run first.

A batched call (:meth:`Runtime.execute_batch`, dynamic batching in the executor) follows the
same contract for several workloads of one (shape, variant) at once: their inputs are stacked
along a new leading dimension (untimed, like casting), and ``exec_ms`` of the one call is
timed as above; each workload is reported its share, ``batch_exec_ms / batch_size``. A new
(shape, variant, batch size) gets its own build and warm-up, outside the timing.
"""

from __future__ import annotations

import platform
import re
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.devices import DeviceSpec
from models.ops import MODES, OP_KINDS, PRECISIONS, OpSpec, Variant, supports_precision
from runtimes.energy import EnergyMeter, NullMeter

Capability = tuple[str, str, str]  # (op kind, precision, mode)
WARM_CACHE_SIZE = 512  # distinct (shape, variant) pairs kept warm/compiled per runtime


class VariantRefused(RuntimeError):
    """The runtime does not run this (kind, precision, mode); ``str(exc)`` is the reason."""


@dataclass(frozen=True)
class Execution:
    """What one execution measured. ``output`` is float32 (None for simulated devices)."""

    output: np.ndarray | None
    exec_ms: float
    compile_ms: float | None
    energy_j: float | None
    warmup: bool  # True when this call was the first of its (shape, variant) and warmed it up
    # The one-time cost of that first call, outside ``exec_ms``: building (compiling) the
    # function plus the untimed warm-up run. None when the (shape, variant) was already warm.
    setup_ms: float | None = None
    # Dynamic batching: how many workloads the timed call ran, and that call's whole time
    # (``exec_ms`` is then this workload's share of it). 1 and None for a call of its own.
    batch_size: int = 1
    batch_exec_ms: float | None = None
    # ``energy_j`` is modelled from published power (the simulator), not read from a counter.
    energy_simulated: bool = False
    # The CPU time the executor's process spent over the timed call (all its threads), on a
    # CPU device only (None elsewhere: a GPU's time is not the host's). Beside ``exec_ms`` it
    # says how much of the wall time the op had its cores: on a core shared with other
    # executors the wall time stretches with their work, the CPU time does not
    # (docs/contract.md, ``cpu_ms``). A batched call's share, as ``exec_ms``.
    cpu_ms: float | None = None


def machine_arch() -> str:
    """``x86`` or ``arm`` (or the raw machine name, lowercased, for anything else)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686", "i386"):
        return "x86"
    if machine in ("aarch64", "arm64") or machine.startswith("arm"):
        return "arm"
    return re.sub(r"[^a-z0-9]", "", machine) or "unknown"


_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro", "amd", "radeon", "instinct", "google"}


def accelerator_model(name: str) -> str:
    """A topic-safe model name: ``NVIDIA H100 80GB HBM3`` -> ``h100``,
    ``NVIDIA A100-SXM4-80GB`` -> ``a100``, ``NVIDIA GeForce RTX 4090`` -> ``rtx4090``,
    ``TPU v5 lite`` -> ``v5lite``."""
    tokens = [t for t in re.split(r"[\s_]+", name.lower()) if t and t not in _VENDOR_WORDS]
    if tokens and tokens[0] == "tpu":
        return re.sub(r"[^a-z0-9]", "", "".join(tokens[1:])) or "tpu"
    picked: list[str] = []
    for token in tokens:
        picked.append(token.split("-")[0])
        if any(c.isdigit() for c in token):
            break
    return re.sub(r"[^a-z0-9]", "", "".join(picked)) or "unknown"


def device_class_name(runtime: str, device_kind: str, model: str) -> str:
    """``<runtime>-<device kind>-<model>``, lowercase, only ``[a-z0-9-]``."""
    raw = f"{runtime}-{device_kind}-{model}".lower()
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", raw)).strip("-")


def contract_refusal(kind: str, precision: str, mode: str) -> str | None:
    """Reasons that hold on every runtime: unknown names, int8 outside GEMM-shaped ops."""
    if kind not in OP_KINDS:
        return f"unknown op kind {kind!r}"
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r}"
    if mode not in MODES:
        return f"unknown mode {mode!r}"
    if not supports_precision(kind, precision):
        return f"{precision} is only defined for linear, matmul and mlp (dynamic quantization)"
    return None


class Runtime(ABC):
    """One runtime bound to one device. Not thread-safe: the executor calls it from one thread."""

    name: str
    device: str
    device_class: str
    simulated: bool = False

    def __init__(self) -> None:
        self._warm: OrderedDict[tuple[str, Variant], Any] = OrderedDict()
        self.meter: EnergyMeter = NullMeter()
        # A catalog device whose published idle and peak power model the energy of an
        # execution no counter measured (runtimes/work.py): the simulator's own device, or
        # what an executor is given with --power-model; None: unmeasured energy stays null.
        self.power_model: DeviceSpec | None = None

    @abstractmethod
    def refusal(self, kind: str, precision: str, mode: str) -> str | None:
        """Why this runtime will not run (kind, precision, mode), or None if it will."""

    def capabilities(self) -> list[Capability]:
        """Every (kind, precision, mode) this runtime runs, in catalog order."""
        return [
            (k, p, m)
            for k in OP_KINDS
            for p in PRECISIONS
            for m in MODES
            if self.refusal(k, p, m) is None
        ]

    def memory(self) -> dict[str, int | None]:
        """Device memory for heartbeats; subclasses with device memory override."""
        return {"device_memory_used_bytes": None, "device_memory_total_bytes": None}

    # --- the timing loop; subclasses supply the four hooks below -------------------------
    @abstractmethod
    def _prepare(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Any:
        """Move/cast/pack inputs for ``variant`` (untimed). Returns the run's arguments."""

    @abstractmethod
    def _build(self, spec: OpSpec, variant: Variant, args: Any) -> tuple[Any, float | None]:
        """A callable ``fn(args) -> device output``, and its compile time in ms if compiled.

        Called once per new (shape, variant); the result is cached.
        """

    @abstractmethod
    def _sync(self, out: Any) -> None:
        """Block until the device has finished producing ``out``."""

    @abstractmethod
    def _to_numpy(self, out: Any) -> np.ndarray:
        """Copy a device output to a float32 NumPy array."""

    def batchable(self, kind: str, precision: str, mode: str) -> bool:
        """Whether :meth:`execute_batch` runs workloads of (kind, precision, mode) as one
        batched call; the default runs none (each workload is a call of its own)."""
        return False

    def _prepare_batch(
        self, spec: OpSpec, variant: Variant, inputs: list[dict[str, np.ndarray]]
    ) -> Any:
        """Stack the inputs of several workloads along a new leading dimension and prepare
        them as one workload's (untimed); batching runtimes implement :meth:`_build_batch`
        and :meth:`_split_batch`."""
        stacked = {name: np.stack([one[name] for one in inputs]) for name in inputs[0]}
        return self._prepare(spec, variant, stacked)

    def _build_batch(
        self, spec: OpSpec, variant: Variant, args: Any, size: int
    ) -> tuple[Any, float | None]:
        """As :meth:`_build`, for a function over ``size`` stacked workloads."""
        raise NotImplementedError

    def _split_batch(self, out: Any, size: int) -> list[np.ndarray]:
        """The float32 output of each workload of a batched call's output."""
        stacked = self._to_numpy(out)
        return [stacked[i] for i in range(size)]

    @property
    def measures_cpu(self) -> bool:
        """Whether executions report their CPU time (``Execution.cpu_ms``): real runtimes on
        the host's CPU, where that time is the op's own work."""
        return self.device == "cpu" and not self.simulated

    def _timed(self, key: tuple[str, Variant], build: Any, args: Any) -> tuple[
            Any, float, float | None, float | None, float | None, bool, float | None]:
        """The honest timing loop: build and warm up a new key (untimed), then one measured
        run. (output, elapsed ms, compile ms, setup ms, energy J, warmup, CPU ms or None)."""
        compile_ms: float | None = None
        setup_ms: float | None = None
        warmup = key not in self._warm
        if warmup:
            setup_start = time.perf_counter_ns()
            fn, compile_ms = build()
            self._sync(fn(args))  # warm-up: allocator, autotuning, lazy init; not in exec_ms
            setup_ms = (time.perf_counter_ns() - setup_start) / 1e6
            self._warm[key] = fn
            while len(self._warm) > WARM_CACHE_SIZE:
                self._warm.popitem(last=False)
        else:
            self._warm.move_to_end(key)
            fn = self._warm[key]
        before = self.meter.sample()
        cpu = self.measures_cpu
        cpu_start = time.process_time_ns() if cpu else 0
        start = time.perf_counter_ns()
        out = fn(args)
        self._sync(out)
        elapsed_ns = time.perf_counter_ns() - start
        cpu_ms = (time.process_time_ns() - cpu_start) / 1e6 if cpu else None
        energy_j = self.meter.joules(before, self.meter.sample())
        return out, elapsed_ns / 1e6, compile_ms, setup_ms, energy_j, warmup, cpu_ms

    def execute(self, spec: OpSpec, variant: Variant, inputs: dict[str, np.ndarray]) -> Execution:
        """Run ``spec`` in exactly ``variant`` on ``inputs`` and measure it.

        Raises VariantRefused (never substitutes another variant); other exceptions (OOM,
        backend errors) propagate for the caller to report.
        """
        reason = self.refusal(spec.kind, variant.precision, variant.mode)
        if reason is not None:
            raise VariantRefused(reason)
        args = self._prepare(spec, variant, inputs)
        out, exec_ms, compile_ms, setup_ms, energy_j, warmup, cpu_ms = self._timed(
            (spec.signature(), variant), lambda: self._build(spec, variant, args), args)
        return Execution(
            output=self._to_numpy(out),
            exec_ms=exec_ms,
            compile_ms=compile_ms,
            energy_j=energy_j,
            warmup=warmup,
            setup_ms=setup_ms,
            cpu_ms=cpu_ms,
        )

    def execute_batch(
        self, spec: OpSpec, variant: Variant, inputs: list[dict[str, np.ndarray]]
    ) -> list[Execution]:
        """Run several workloads of one ``spec`` and ``variant``, one Execution each, in order.

        Where :meth:`batchable` says so (and there is more than one) they run as one batched
        call: each Execution has ``batch_size``, the call's ``batch_exec_ms``, its share of it
        as ``exec_ms`` (and of the energy), and the first one carries the call's setup and
        compile time. Otherwise each runs on its own, exactly as :meth:`execute`. Raises as
        :meth:`execute` does, for the whole batch.
        """
        size = len(inputs)
        if size <= 1 or not self.batchable(spec.kind, variant.precision, variant.mode):
            return [self.execute(spec, variant, one) for one in inputs]
        reason = self.refusal(spec.kind, variant.precision, variant.mode)
        if reason is not None:
            raise VariantRefused(reason)
        args = self._prepare_batch(spec, variant, inputs)
        out, batch_ms, compile_ms, setup_ms, energy_j, warmup, cpu_ms = self._timed(
            (f"{spec.signature()}#batch={size}", variant),
            lambda: self._build_batch(spec, variant, args, size), args)
        outputs = self._split_batch(out, size)
        return [
            Execution(
                output=output,
                exec_ms=batch_ms / size,
                compile_ms=compile_ms if i == 0 else None,
                energy_j=energy_j / size if energy_j is not None else None,
                warmup=warmup and i == 0,
                setup_ms=setup_ms if i == 0 else None,
                batch_size=size,
                batch_exec_ms=batch_ms,
                cpu_ms=cpu_ms / size if cpu_ms is not None else None,
            )
            for i, output in enumerate(outputs)
        ]

    def close(self) -> None:
        """Release device resources (caches, compiled functions)."""
        self._warm.clear()
