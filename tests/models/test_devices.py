"""Device catalog and roofline model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from models.devices import DEVICE_CATALOG, roofline_energy_j, roofline_seconds
from models.ops import PRECISIONS, Variant, parse_op, supports_precision
from tests.models.test_ops import valid_ops

REQUIRED = {"h100", "a100", "l4", "tpu-v5e", "jetson-orin", "cpu-core"}


def test_catalog_has_the_contract_devices_with_sane_figures() -> None:
    assert set(DEVICE_CATALOG) >= REQUIRED
    for name, dev in DEVICE_CATALOG.items():
        assert dev.name == name and dev.kind in ("gpu", "tpu", "cpu", "edge")
        assert dev.supports("fp32"), "fp32 is every workload's default precision"
        assert set(dev.peak_flops) <= set(PRECISIONS)
        assert all(v > 0 for v in dev.peak_flops.values())
        assert dev.mem_bw_bytes_s > 0 and dev.launch_overhead_s > 0
        assert dev.tdp_w > dev.idle_w > 0
        # lower precisions are never slower on paper
        assert dev.peak_flops.get("bf16", dev.peak_flops["fp32"]) >= dev.peak_flops["fp32"]


def test_published_h100_figures() -> None:
    h100 = DEVICE_CATALOG["h100"]
    assert h100.peak_flops["fp32"] == pytest.approx(67e12)
    assert h100.peak_flops["bf16"] == pytest.approx(989.5e12)
    assert h100.mem_bw_bytes_s == pytest.approx(3.35e12)
    assert not DEVICE_CATALOG["tpu-v5e"].supports("fp16")
    assert not DEVICE_CATALOG["cpu-core"].supports("tf32")


def test_roofline_compute_bound_large_matmul() -> None:
    dev = DEVICE_CATALOG["a100"]
    op = parse_op({"kind": "matmul", "m": 8192, "k": 8192, "n": 8192})
    seconds = roofline_seconds(dev, op, Variant("bf16"))
    assert seconds == pytest.approx(dev.launch_overhead_s + 2 * 8192**3 / 312e12)


def test_roofline_memory_bound_softmax() -> None:
    dev = DEVICE_CATALOG["l4"]
    op = parse_op({"kind": "softmax", "rows": 4096, "dim": 4096})
    seconds = roofline_seconds(dev, op, Variant("fp32"))
    assert seconds == pytest.approx(dev.launch_overhead_s + 2 * 4096 * 4096 * 4 / 300e9)


def test_unsupported_precision_raises() -> None:
    op = parse_op({"kind": "matmul", "m": 8, "k": 8, "n": 8})
    with pytest.raises(ValueError, match="no fp16"):
        roofline_seconds(DEVICE_CATALOG["tpu-v5e"], op, Variant("fp16"))
    with pytest.raises(ValueError):
        roofline_energy_j(DEVICE_CATALOG["cpu-core"], op, Variant("tf32"))


@settings(max_examples=100, deadline=None)
@given(valid_ops())
def test_roofline_is_positive_and_faster_devices_win(d: dict) -> None:
    op = parse_op(d)
    for dev in DEVICE_CATALOG.values():
        for p in dev.peak_flops:
            if supports_precision(op.kind, p):
                assert roofline_seconds(dev, op, Variant(p)) >= dev.launch_overhead_s
                assert roofline_energy_j(dev, op, Variant(p)) > 0
    big = parse_op({**d, "dtype": "float32"})
    h100, cpu = DEVICE_CATALOG["h100"], DEVICE_CATALOG["cpu-core"]
    busy = roofline_seconds(h100, big, Variant("fp32")) - h100.launch_overhead_s
    assert busy <= roofline_seconds(cpu, big, Variant("fp32")) - cpu.launch_overhead_s
