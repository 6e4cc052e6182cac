"""Every op x runtime x precision x mode against the float64 reference (tiny shapes)."""

from __future__ import annotations

import numpy as np
import pytest

from models.ops import MODES, PRECISIONS, Variant, make_inputs, parse_op, reference
from models.tensors import encode_tensor
from models.workload import parse_workload
from runtimes import Runtime, VariantRefused, get_runtime
from runtimes.check import within_tolerance
from tests.runtimes.cases import CASES, case
from tests.runtimes.conftest import CPU_RUNTIMES


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case_name", sorted(CASES))
@pytest.mark.parametrize("runtime_name", CPU_RUNTIMES)
def test_matches_reference_or_refuses(
    cpu_runtimes: dict[str, Runtime], runtime_name: str, case_name: str, precision: str, mode: str
) -> None:
    rt = cpu_runtimes[runtime_name]
    spec = case(case_name)
    variant = Variant(precision, mode)
    inputs = make_inputs(spec, seed=11)
    reason = rt.refusal(spec.kind, precision, mode)
    if reason is not None:
        assert isinstance(reason, str) and reason
        assert (spec.kind, precision, mode) not in rt.capabilities()
        with pytest.raises(VariantRefused, match="."):
            rt.execute(spec, variant, inputs)
        return
    first = rt.execute(spec, variant, inputs)
    ok, error = within_tolerance(first.output, reference(spec, inputs), precision)
    assert ok, f"{rt.device_class} {spec.kind} {variant}: relative error {error:.2e}"
    assert first.output.dtype == np.float32 and first.output.shape == spec.output_shape()
    assert first.exec_ms > 0 and first.energy_j is None or first.energy_j >= 0
    # The first call's build and warm-up are reported apart from the execution.
    assert first.warmup and first.setup_ms is not None and first.setup_ms > 0
    # Same inputs, warm: same answer, no warm-up, no compile or setup time.
    second = rt.execute(spec, variant, inputs)
    assert not second.warmup and second.compile_ms is None and second.setup_ms is None
    np.testing.assert_allclose(second.output, first.output, rtol=0, atol=1e-6)


def test_capability_matrix_on_this_cpu(cpu_runtimes: dict[str, Runtime]) -> None:
    caps = {name: set(rt.capabilities()) for name, rt in cpu_runtimes.items()}
    assert {p for _, p, _ in caps["numpy"]} == {"fp32"}
    assert {m for _, _, m in caps["numpy"]} == {"eager"}
    assert {p for _, p, _ in caps["torch"]} == {"fp32", "bf16", "fp16", "int8"}
    assert {m for _, _, m in caps["torch"]} == {"eager"}  # compile on CPU is opt-in
    assert {p for _, p, _ in caps["jax"]} == {"fp32", "bf16", "fp16", "int8"}
    assert {m for _, _, m in caps["jax"]} == {"eager", "compiled"}
    for rt_caps in caps.values():
        assert all(k in ("linear", "matmul", "mlp") for k, p, _ in rt_caps if p == "int8")
        assert not any(p == "tf32" for _, p, _ in rt_caps)


def test_device_classes(cpu_runtimes: dict[str, Runtime]) -> None:
    import platform

    arch = "x86" if platform.machine() in ("x86_64", "AMD64") else "arm"
    for name, rt in cpu_runtimes.items():
        assert rt.device_class == f"{name}-cpu-{arch}"
        assert rt.device == "cpu" and not rt.simulated


def test_jax_compiled_reports_compile_time_separately(cpu_runtimes: dict[str, Runtime]) -> None:
    rt = cpu_runtimes["jax"]
    spec = parse_op({"kind": "matmul", "m": 7, "k": 9, "n": 11})  # a shape no other test uses
    inputs = make_inputs(spec, 0)
    first = rt.execute(spec, Variant("fp32", "compiled"), inputs)
    assert first.warmup and first.compile_ms is not None and first.compile_ms > 0
    second = rt.execute(spec, Variant("fp32", "compiled"), inputs)
    assert not second.warmup and second.compile_ms is None
    # Another variant of the same shape is a new compilation.
    assert rt.execute(spec, Variant("bf16", "compiled"), inputs).compile_ms is not None


@pytest.mark.parametrize("runtime_name", CPU_RUNTIMES)
def test_inline_inputs_round_trip_and_match_numpy(
    cpu_runtimes: dict[str, Runtime], runtime_name: str
) -> None:
    spec = case("linear-gelu")
    arrays = {
        k: np.random.default_rng(5).standard_normal(v.shape).astype(np.float32)
        for k, v in make_inputs(spec, 0).items()
    }
    w = parse_workload(
        {
            "id": "inline-1",
            "op": spec.to_dict(),
            "inputs": {k: encode_tensor(v) for k, v in arrays.items()},
        }
    )
    assert w.inputs is not None
    out = cpu_runtimes[runtime_name].execute(w.op, Variant("fp32"), dict(w.inputs)).output
    np.testing.assert_allclose(out, reference(spec, arrays), rtol=1e-5, atol=1e-5)


def test_torch_int_mm_path_matches_reference() -> None:
    """The CUDA int8 implementation (torch._int_mm with padding), exercised on the CPU."""
    rt = get_runtime("torch", "cpu", threads=1, int8_impl="int_mm")
    for name in ("matmul", "linear-gelu", "linear-silu-nobias", "mlp-relu", "mlp-tanh"):
        spec = case(name)
        inputs = make_inputs(spec, 3)
        out = rt.execute(spec, Variant("int8"), inputs).output
        ok, error = within_tolerance(out, reference(spec, inputs), "int8")
        assert ok, f"{name}: {error:.2e}"


@pytest.mark.slow
def test_torch_compile_on_cpu_when_enabled() -> None:
    """Opt-in torch.compile on the CPU (~30 s to build: inductor emits and compiles C++)."""
    rt = get_runtime("torch", "cpu", threads=1, compile_cpu=True)
    spec = case("softmax")
    assert (spec.kind, "fp32", "compiled") in rt.capabilities()
    inputs = make_inputs(spec, 1)
    first = rt.execute(spec, Variant("fp32", "compiled"), inputs)
    assert first.compile_ms is not None and first.compile_ms > first.exec_ms
    assert within_tolerance(first.output, reference(spec, inputs), "fp32")[0]


def test_unknown_runtime_and_device() -> None:
    with pytest.raises(ValueError, match="unknown runtime"):
        get_runtime("tensorflow", "cpu")
    with pytest.raises(RuntimeError):
        get_runtime("numpy", "cuda:0")
    with pytest.raises(RuntimeError):
        get_runtime("torch", "tpu:0")
    with pytest.raises(ValueError, match="threads"):
        get_runtime("numpy", "cpu", threads=0)
