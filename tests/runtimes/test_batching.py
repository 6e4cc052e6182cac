"""Dynamic batching: a batched call gives every workload what its own call gives, within the
precision's tolerance of the float64 reference, on every runtime and op kind that batches."""

from __future__ import annotations

import numpy as np
import pytest

from models.ops import Variant, make_inputs, reference
from runtimes import Runtime, get_runtime
from runtimes.check import TOLERANCE, relative_error, within_tolerance
from tests.runtimes.cases import CASES, case
from tests.runtimes.conftest import CPU_RUNTIMES

BATCH = 3
# What each runtime batches (Runtime.batchable), stated here so a runtime that stops
# batching a kind (running it one by one, which is still correct) fails a test.
BATCHED = {
    "torch": {"matmul", "bmm", "linear", "conv2d", "attention", "layernorm", "softmax", "mlp"},
    "jax": {"matmul", "bmm", "linear", "conv2d", "attention", "layernorm", "softmax", "mlp"},
    "numpy": {"matmul", "bmm", "attention", "layernorm", "softmax"},
}


@pytest.fixture(scope="module")
def runtimes() -> dict[str, Runtime]:
    """Runtimes of this module's own: the shared ones' warm caches are what
    test_correctness checks the first call of a shape against."""
    return {name: get_runtime(name, "cpu", threads=1) for name in CPU_RUNTIMES}


VARIANTS = {"torch": ("fp32", "bf16", "fp16"), "jax": ("fp32", "bf16", "fp16"),
            "numpy": ("fp32",)}


@pytest.mark.parametrize("case_name", sorted(CASES))
@pytest.mark.parametrize("runtime_name", CPU_RUNTIMES)
def test_batched_call_matches_reference_and_unbatched(
    runtimes: dict[str, Runtime], runtime_name: str, case_name: str
) -> None:
    rt = runtimes[runtime_name]
    spec = case(case_name)
    inputs = [make_inputs(spec, seed) for seed in range(20, 20 + BATCH)]
    for precision in VARIANTS[runtime_name]:
        variant = Variant(precision)
        batched = rt.execute_batch(spec, variant, inputs)
        expect_batch = spec.kind in BATCHED[runtime_name]
        assert rt.batchable(spec.kind, precision, "eager") == expect_batch
        assert len(batched) == BATCH
        alone = [rt.execute(spec, variant, one) for one in inputs]
        for i, (execution, one, own) in enumerate(zip(batched, inputs, alone, strict=True)):
            ok, error = within_tolerance(execution.output, reference(spec, one), precision)
            assert ok, f"{rt.name} {case_name} {precision} #{i}: relative error {error:.2e}"
            assert execution.output is not None and own.output is not None
            assert execution.output.dtype == np.float32
            assert execution.output.shape == spec.output_shape()
            # Against the workload's own call: the same kernels on the same values, so at
            # most the precision's rounding apart (bf16 GEMMs may block differently).
            assert relative_error(execution.output, own.output.astype(np.float64)) <= (
                TOLERANCE[precision])
            if expect_batch:
                assert execution.batch_size == BATCH and execution.batch_exec_ms is not None
                assert execution.exec_ms == pytest.approx(execution.batch_exec_ms / BATCH)
            else:
                assert execution.batch_size == 1 and execution.batch_exec_ms is None


def test_outputs_are_each_workloads_own(runtimes: dict[str, Runtime]) -> None:
    """Stacking keeps workloads apart: different inputs, different outputs, in order."""
    rt = runtimes["torch"]
    spec = case("matmul")
    inputs = [make_inputs(spec, seed) for seed in (1, 2, 3, 4)]
    batched = rt.execute_batch(spec, Variant("fp32"), inputs)
    for execution, one in zip(batched, inputs, strict=True):
        np.testing.assert_allclose(execution.output, reference(spec, one), rtol=1e-5, atol=1e-6)
    assert not np.allclose(batched[0].output, batched[1].output)


def test_a_new_batch_size_is_warmed_up_outside_the_timing(runtimes: dict[str, Runtime]) -> None:
    rt = runtimes["torch"]
    spec = case("mlp-tanh")
    inputs = [make_inputs(spec, seed) for seed in range(5)]
    first = rt.execute_batch(spec, Variant("fp32"), inputs)
    # Only the first workload of the call carries the call's one-time setup.
    assert first[0].warmup and first[0].setup_ms is not None and first[0].setup_ms > 0
    assert all(not e.warmup and e.setup_ms is None for e in first[1:])
    again = rt.execute_batch(spec, Variant("fp32"), inputs)
    assert all(not e.warmup and e.setup_ms is None for e in again)
    # Another batch size is another warm-up.
    assert rt.execute_batch(spec, Variant("fp32"), inputs[:4])[0].warmup


def test_int8_runs_one_by_one(runtimes: dict[str, Runtime]) -> None:
    rt = runtimes["torch"]
    spec = case("linear-gelu")
    inputs = [make_inputs(spec, seed) for seed in range(2)]
    assert not rt.batchable("linear", "int8", "eager")
    executions = rt.execute_batch(spec, Variant("int8"), inputs)
    assert [e.batch_size for e in executions] == [1, 1]
    for execution, one in zip(executions, inputs, strict=True):
        assert within_tolerance(execution.output, reference(spec, one), "int8")[0]
