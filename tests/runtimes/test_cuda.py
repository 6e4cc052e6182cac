"""The correctness grid on CUDA (torch cuda:0, jax gpu:0); skipped where no GPU exists."""

from __future__ import annotations

import pytest

from models.ops import MODES, PRECISIONS, Variant, make_inputs, reference
from runtimes import Runtime, VariantRefused, get_runtime
from runtimes.check import within_tolerance
from tests.runtimes.cases import CASES, case
from tests.runtimes.conftest import cuda_available

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not cuda_available(), reason="no CUDA device (torch.cuda.is_available() is false)"
    ),
]
_RUNTIMES: dict[str, Runtime] = {}


def _runtime(name: str) -> Runtime:
    if name not in _RUNTIMES:
        try:
            _RUNTIMES[name] = get_runtime(name, "cuda:0", threads=1)
        except RuntimeError as exc:  # e.g. jax installed without its CUDA plugin
            pytest.skip(f"{name} has no CUDA device: {exc}")
    return _RUNTIMES[name]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case_name", sorted(CASES))
@pytest.mark.parametrize("runtime_name", ["torch", "jax"])
def test_cuda_matches_reference_or_refuses(
    runtime_name: str, case_name: str, precision: str, mode: str
) -> None:
    rt = _runtime(runtime_name)
    spec = case(case_name)
    inputs = make_inputs(spec, seed=11)
    if rt.refusal(spec.kind, precision, mode):
        with pytest.raises(VariantRefused):
            rt.execute(spec, Variant(precision, mode), inputs)
        return
    result = rt.execute(spec, Variant(precision, mode), inputs)
    ok, error = within_tolerance(result.output, reference(spec, inputs), precision)
    assert ok, f"{rt.device_class} {spec.kind} {precision}/{mode}: relative error {error:.2e}"
    assert rt.device_class.startswith(f"{runtime_name}-cuda-")


def test_torch_cuda_offers_tf32_and_compiled() -> None:
    rt = _runtime("torch")
    caps = set(rt.capabilities())
    assert ("matmul", "fp32", "compiled") in caps
    assert ("matmul", "int8", "eager") in caps
    memory = rt.memory()
    assert memory["device_memory_total_bytes"] and memory["device_memory_total_bytes"] > 0
