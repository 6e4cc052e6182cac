"""The simulator follows its roofline, with noise and drift, and says it is simulated."""

from __future__ import annotations

import numpy as np
import pytest

from models.devices import DEVICE_CATALOG, modelled_energy_j, roofline_seconds
from models.ops import SpecError, Variant, parse_op
from runtimes import VariantRefused, get_runtime
from runtimes.sim_rt import SimRuntime, drift_factor, parse_drift

MATMUL = parse_op({"kind": "matmul", "m": 4096, "k": 4096, "n": 4096})
SOFTMAX = parse_op({"kind": "softmax", "rows": 8192, "dim": 8192})


class FakeTime:
    """A clock the test moves, and a sleep that records what it was asked for."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def make(device: str = "h100", **kwargs: object) -> tuple[SimRuntime, FakeTime]:
    fake = FakeTime()
    rt = SimRuntime(device, clock=fake.clock, sleep=fake.sleep, seed=0, **kwargs)  # type: ignore[arg-type]
    return rt, fake


@pytest.mark.parametrize("device", sorted(DEVICE_CATALOG))
def test_without_noise_the_sim_waits_exactly_the_roofline(device: str) -> None:
    rt, fake = make(device, noise_sigma=0.0)
    for op in (MATMUL, SOFTMAX):
        result = rt.execute(op, Variant("fp32"), {})
        assert fake.slept[-1] == pytest.approx(
            roofline_seconds(DEVICE_CATALOG[device], op, Variant("fp32"))
        )
        assert result.output is None and result.compile_ms is None
        # Energy: the published power over the simulated time (not the wall time around it).
        assert result.energy_simulated and result.energy_j == pytest.approx(
            modelled_energy_j(DEVICE_CATALOG[device], fake.slept[-1] * 1e3))
    assert rt.simulated and rt.device_class == f"sim-{device}"


def test_noise_is_multiplicative_lognormal_around_the_roofline() -> None:
    rt, fake = make(noise_sigma=0.1)
    for _ in range(2000):
        rt.execute(MATMUL, Variant("bf16"), {})
    ratios = np.array(fake.slept) / roofline_seconds(
        DEVICE_CATALOG["h100"], MATMUL, Variant("bf16")
    )
    assert np.median(ratios) == pytest.approx(1.0, abs=0.01)
    assert np.std(np.log(ratios)) == pytest.approx(0.1, rel=0.1)
    assert ratios.min() > 0


def test_lower_precision_is_faster_on_a_compute_bound_op() -> None:
    rt, _ = make(noise_sigma=0.0)
    assert rt.expected_seconds(MATMUL, Variant("bf16")) < rt.expected_seconds(
        MATMUL, Variant("fp32")
    )


def test_drift_schedule_multiplies_times_from_its_breakpoints() -> None:
    rt, fake = make(noise_sigma=0.0, drift="0:1,30:4,60:1")
    base = roofline_seconds(DEVICE_CATALOG["h100"], MATMUL, Variant("fp32"))
    for at, factor in ((0, 1), (29.9, 1), (30, 4), (59, 4), (60, 1), (1000, 1)):
        fake.now = at
        rt.execute(MATMUL, Variant("fp32"), {})
        assert fake.slept[-1] == pytest.approx(base * factor), at


def test_drift_parsing() -> None:
    assert parse_drift("30:4, 0:1") == [(0.0, 1.0), (30.0, 4.0)]
    assert parse_drift(None) == [] and parse_drift("") == []
    assert drift_factor([(10.0, 3.0)], 5.0) == 1.0  # before the first breakpoint
    for bad in ("10", "a:b", "10:0", "-1:2", "10:-2", "1:inf"):
        with pytest.raises(SpecError):
            parse_drift(bad)


def test_refusals() -> None:
    tpu, _ = make("tpu-v5e")
    assert tpu.refusal("matmul", "fp16", "eager")
    assert tpu.refusal("matmul", "bf16", "compiled")
    assert tpu.refusal("conv2d", "int8", "eager")
    assert tpu.refusal("matmul", "int8", "eager") is None
    with pytest.raises(VariantRefused):
        tpu.execute(MATMUL, Variant("fp16"), {})
    assert ("matmul", "tf32", "eager") not in tpu.capabilities()
    with pytest.raises(RuntimeError, match="no simulated device"):
        get_runtime("sim", "h900")


def test_real_sleep_is_never_shorter_than_the_simulated_time() -> None:
    """The sim sleeps at least its simulated time (how much longer depends on the machine's
    load: the accuracy is a benchmark figure, not a pass mark)."""
    rt = get_runtime("sim", "sim-cpu-core", noise_sigma=0.0)
    op = parse_op({"kind": "matmul", "m": 256, "k": 256, "n": 256})  # ~0.17 ms on one core
    target_ms = rt.expected_seconds(op, Variant("fp32")) * 1e3  # type: ignore[attr-defined]
    took = [rt.execute(op, Variant("fp32"), {}).exec_ms for _ in range(5)]
    assert min(took) >= target_ms * 0.99
