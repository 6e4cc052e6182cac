"""The executor's pure core: one route in, one outcome and one metric out, never a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.ops import SpecError, Variant, make_inputs, parse_op, reference
from models.tensors import checksum, decode_tensor, encode_tensor
from models.workload import WorkloadLimits
from runtimes import Runtime, get_runtime
from runtimes.check import within_tolerance
from runtimes.work import (
    Parsed,
    parse_route,
    parsed_batch_key,
    perform,
    perform_batch,
    plan,
    read_slowdown,
    route_id,
)

OP = {"kind": "matmul", "m": 3, "k": 4, "n": 5}


def batch_key(route: dict[str, Any], runtime: Runtime,
              limits: WorkloadLimits) -> tuple[Any, Parsed] | None:
    """What the executor's plan does with a route: its batch key with its parse, or None when
    it runs alone (it does not parse, or it is not batched)."""
    parsed = parse_route(route, limits)
    key = parsed_batch_key(parsed, runtime) if parsed is not None else None
    return None if key is None or parsed is None else (key, parsed)


def route(precision: str = "fp32", **workload: Any) -> dict[str, Any]:
    return {
        "id": "w1",
        "workload": {"id": "w1", "op": OP, "precisions": [precision], **workload},
        "device_class": "x",
        "variant": {"precision": precision, "mode": "eager"},
        "predicted_ms": 2.0,
        "decided_at_ms": 1000,
        "attempt": 2,
    }


@pytest.fixture(scope="module")
def numpy_rt() -> Runtime:
    return get_runtime("numpy", "cpu", threads=1)


def run(rt: Runtime, r: dict[str, Any], **kw: Any) -> Any:
    return perform(r, rt, device_id="d", limits=WorkloadLimits(), clock_ms=lambda: 1500, **kw)


def test_ok_route_gives_checked_outcome_and_metric(numpy_rt: Runtime) -> None:
    result = run(numpy_rt, route(seed=4, return_output=True))
    o, m = result.outcome, result.metric
    spec = parse_op(OP)
    out = decode_tensor(o["output"], 100)
    assert within_tolerance(out, reference(spec, make_inputs(spec, 4)), "fp32")[0]
    assert o["status"] == "ok" and o["error"] is None and o["checksum"] == checksum(out)
    assert o["queue_ms"] == 500 and o["attempt"] == 2 and o["decided_at_ms"] == 1000
    assert m["exec_ms"] == o["latency_ms"] > 0 and m["flops"] == 120 and m["bytes_moved"] == 4 * 47
    assert m["predicted_ms"] == 2.0 and m["op"] == spec.to_dict() and not m["throttled"]
    # The wall clock here is frozen (finished = started), yet the hold is measured: by the
    # monotonic clock, around the inputs, the execution and the checksum.
    assert m["finished_at_ms"] == m["started_at_ms"] and o["held_ms"] > o["latency_ms"]


def test_output_is_omitted_above_the_inline_limit(numpy_rt: Runtime) -> None:
    r = perform(
        route(return_output=True),
        numpy_rt,
        device_id="d",
        limits=WorkloadLimits(max_inline_elements=14),
    )
    assert r.outcome["status"] == "ok" and r.outcome["output"] is None and r.outcome["checksum"]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda r: r.update(variant={"precision": "fp64"}), "unknown precision"),
        (lambda r: r.update(variant=None), "variant must be an object"),
        (lambda r: r["workload"].update(precisions=["fp16"]), "not among the request's precisions"),
        (lambda r: r.update(workload="nope"), "JSON object"),
        (lambda r: r["workload"]["op"].update(m=-1), "must be >= 1"),
        (
            lambda r: r["workload"].update(
                inputs={
                    "a": encode_tensor(np.ones((3, 4), np.float32)),
                    "b": {"dtype": "float32", "shape": [4, 5], "data_b64": "@@"},
                }
            ),
            "input b",
        ),
    ],
)
def test_workload_faults_become_error_outcomes(numpy_rt: Runtime, mutate: Any, reason: str) -> None:
    r = route()
    r["workload"]["op"] = dict(OP)
    mutate(r)
    result = run(numpy_rt, r)
    assert result.outcome["status"] == "error" and reason in result.outcome["error"]
    assert result.metric["status"] == "error" and result.metric["exec_ms"] == 0.0


def test_refused_variant_is_an_error_not_a_substitute(numpy_rt: Runtime) -> None:
    result = run(numpy_rt, route("bf16"))
    assert result.outcome["status"] == "error" and "bfloat16" in result.outcome["error"]
    assert result.outcome["variant"] == {"precision": "bf16", "mode": "eager"}


class Exploding(Runtime):
    name, device, device_class = "boom", "cpu", "boom-cpu-x86"

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    def refusal(self, kind: str, precision: str, mode: str) -> str | None:
        return None

    def _prepare(self, spec: Any, variant: Any, inputs: Any) -> Any:
        raise self.exc

    def _build(self, spec: Any, variant: Any, args: Any) -> Any:
        raise AssertionError

    def _sync(self, out: Any) -> None: ...

    def _to_numpy(self, out: Any) -> np.ndarray:
        raise AssertionError


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (MemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "out of memory: CUDA"),
        (RuntimeError("cuBLAS failure"), "RuntimeError: cuBLAS failure"),
    ],
)
def test_backend_failures_become_error_outcomes(exc: BaseException, reason: str) -> None:
    result = run(Exploding(exc), route())
    assert result.outcome["status"] == "error" and result.outcome["error"].startswith(reason)


def test_sim_outcome_has_no_output_and_says_simulated() -> None:
    sim = get_runtime("sim", "cpu-core", noise_sigma=0.0)
    result = run(sim, route(return_output=True))
    assert result.outcome["status"] == "ok" and result.outcome["simulated"]
    assert result.outcome["output"] is None and result.outcome["checksum"] is None
    # Energy is modelled from the device's published power, and says so.
    assert result.outcome["energy_j"] > 0 and result.metric["simulated"]
    assert result.metric["energy_simulated"] and result.outcome["energy_simulated"]


def test_slowdown_really_takes_longer_and_is_marked(tmp_path: Path) -> None:
    sim = get_runtime("sim", "cpu-core", noise_sigma=0.0)
    r = route()
    r["workload"]["op"] = {"kind": "matmul", "m": 256, "k": 256, "n": 256}  # ~0.17 ms simulated
    simulated_ms = sim.expected_seconds(parse_op(r["workload"]["op"]),  # type: ignore[attr-defined]
                                        Variant("fp32")) * 1e3
    base = run(sim, r).metric
    slow = run(sim, r, slowdown=5.0).metric
    assert slow["throttled"] and not base["throttled"]
    # A sleep is never shorter than asked, however loaded the machine (a ratio of two measured
    # sub-millisecond sleeps was not: 0.99 ms against 4.5 x 0.22 ms in CI).
    assert base["exec_ms"] >= 0.99 * simulated_ms
    assert slow["exec_ms"] >= 0.99 * 5.0 * simulated_ms


def test_read_slowdown(tmp_path: Path) -> None:
    f = tmp_path / "s"
    assert read_slowdown(None) == 1.0 and read_slowdown(f) == 1.0
    for text, factor in (
        ("2.5", 2.5),
        ("0.3", 1.0),
        ("nan", 1.0),
        ("x", 1.0),
        ("", 1.0),
        ("1e9", 1000.0),
    ):
        f.write_text(text)
        assert read_slowdown(f) == factor


def test_route_id() -> None:
    assert route_id({"id": "a"}) == "a"
    for bad in ([], {"id": ""}, {"id": 5}, {}):
        with pytest.raises(SpecError):
            route_id(bad)


# --- dynamic batching -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_runtimes() -> dict[str, Runtime]:
    """This module's own runtimes (the session's shared ones are kept cold for
    test_correctness's first-call checks)."""
    return {name: get_runtime(name, "cpu", threads=1) for name in ("numpy", "torch")}


def batch_route(workload_id: str, op: dict[str, Any] = OP, precision: str = "fp32",
                **workload: Any) -> dict[str, Any]:
    return {**route(precision, **workload), "id": workload_id,
            "workload": {"id": workload_id, "op": op, "precisions": [precision], **workload}}


def test_plan_groups_equal_keys_in_first_seen_order_up_to_the_maximum() -> None:
    keys = ["a", "b", None, "a", "a", None, "b", "a"]
    assert plan(keys, 8) == [[0, 3, 4, 7], [1, 6], [2], [5]]
    assert plan(keys, 2) == [[0, 3], [1, 6], [2], [4, 7], [5]]
    assert plan(keys, 1) == [[i] for i in range(8)]
    assert plan([], 4) == []


def test_batch_key_is_op_spec_and_variant(cpu_runtimes: dict[str, Runtime]) -> None:
    torch_rt, limits = cpu_runtimes["torch"], WorkloadLimits()
    key = batch_key(batch_route("a"), torch_rt, limits)
    assert key is not None and key[0] == batch_key(batch_route("b", seed=9), torch_rt, limits)[0]
    other_shape = batch_key(batch_route("c", {**OP, "n": 6}), torch_rt, limits)
    other_dtype = batch_key(batch_route("d", {**OP, "dtype": "float16"}), torch_rt, limits)
    other_variant = batch_key(batch_route("e", precision="bf16"), torch_rt, limits)
    assert len({key[0], other_shape[0], other_dtype[0], other_variant[0]}) == 4  # type: ignore[index]
    # Not batched: a bad spec, a variant the request refuses, int8, a runtime that does not.
    assert batch_key(batch_route("f", {**OP, "m": 0}), torch_rt, limits) is None
    assert batch_key({**batch_route("g"), "variant": {"precision": "bf16"}}, torch_rt,
                     limits) is None
    assert batch_key(batch_route("h", precision="int8"), torch_rt, limits) is None
    linear = {"kind": "linear", "batch": 2, "in_features": 3, "out_features": 4}
    assert batch_key(batch_route("i", linear), cpu_runtimes["numpy"], limits) is None


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_perform_batch_gives_each_workload_its_outcome_and_metric(
    cpu_runtimes: dict[str, Runtime], precision: str
) -> None:
    rt, limits = cpu_runtimes["torch"], WorkloadLimits()
    spec = parse_op(OP)
    inline = make_inputs(spec, 77)
    routes = [batch_route(f"w{i}", precision=precision, seed=i, return_output=True)
              for i in range(4)]
    routes.append(batch_route("inline", precision=precision, return_output=True,
                              inputs={k: encode_tensor(v) for k, v in inline.items()}))
    parsed = [batch_key(r, rt, limits) for r in routes]
    assert all(p is not None for p in parsed)
    clock = iter(range(1500, 1600))
    results = perform_batch([p[1] for p in parsed if p], rt, device_id="d", limits=limits,
                            clock_ms=lambda: next(clock))
    assert [r.outcome["id"] for r in results] == [r["id"] for r in routes]
    expected = [make_inputs(spec, i) for i in range(4)] + [inline]
    for result, inputs in zip(results, expected, strict=True):
        o, m = result.outcome, result.metric
        alone = run(rt, {**routes[0], "workload": {**routes[0]["workload"], "inputs": {
            k: encode_tensor(v) for k, v in inputs.items()}}})
        out = decode_tensor(o["output"], 100)
        assert within_tolerance(out, reference(spec, inputs), precision)[0]
        assert o["status"] == "ok" and o["checksum"] == checksum(out)
        if precision == "fp32":
            # The batched call is another kernel (a batched matmul): on some CPUs it sums the
            # products in another order than the single call, so the bits may differ in the
            # last place (a CI machine's torch did), never by more than fp32 rounding.
            single = decode_tensor(alone.outcome["output"], 100)
            np.testing.assert_allclose(out, single, rtol=1e-6, atol=1e-6)
        assert o["batch_size"] == m["batch_size"] == 5 and alone.metric["batch_size"] == 1
        assert o["latency_ms"] == m["batch_exec_ms"] > 0 and alone.metric["batch_exec_ms"] is None
        assert m["exec_ms"] == pytest.approx(m["batch_exec_ms"] / 5)
        assert o["queue_ms"] == 500 and m["started_at_ms"] == 1500 and m["finished_at_ms"] == 1501
        # Every workload of the call was held for the call's whole time (inputs to checksums).
        assert o["held_ms"] == results[0].outcome["held_ms"] > o["latency_ms"]
        assert m["flops"] == 120 and m["op"] == spec.to_dict() and m["variant"]["precision"] == precision


def test_a_failing_batch_runs_one_by_one(cpu_runtimes: dict[str, Runtime]) -> None:
    """A batched call that raises is retried workload by workload, each with its own call."""
    rt, limits = cpu_runtimes["torch"], WorkloadLimits()
    routes = [batch_route(f"w{i}", seed=i) for i in range(3)]
    parsed = [p[1] for r in routes if (p := batch_key(r, rt, limits))]

    class Failing(type(rt)):  # type: ignore[misc]
        def execute_batch(self, *args: Any) -> Any:
            raise RuntimeError("batched kernel failed")

    failing = Failing.__new__(Failing)
    failing.__dict__.update(rt.__dict__)
    results = perform_batch(parsed, failing, device_id="d", limits=limits)
    assert [r.outcome["status"] for r in results] == ["ok"] * 3
    assert [r.metric["batch_size"] for r in results] == [1, 1, 1]


def test_behind_a_link_the_transfer_is_waited_measured_and_reported(numpy_rt: Runtime) -> None:
    from models.transfer import Link

    waited: list[float] = []
    link = Link(rtt_ms=10.0, bandwidth_mbit_s=8.0)  # 1,000 bytes per ms
    result = run(numpy_rt, route(seed=1), link=link, wait=waited.append)
    up, down = (12 + 20) * 4, 15 * 4  # a 3x4 and a 4x5 float32 matrix up, 3x5 down
    assert waited == pytest.approx([(5.0 + up / 1000) / 1e3, (5.0 + down / 1000) / 1e3])
    m, o = result.metric, result.outcome
    assert m["transfer_bytes"] == up + down and m["link_simulated"]
    assert m["transfer_ms"] is not None and m["transfer_ms"] >= 0
    assert o["transfer_ms"] == m["transfer_ms"] and m["exec_ms"] == o["latency_ms"]
    local = run(numpy_rt, route(seed=1))
    assert local.metric["transfer_ms"] is None and local.metric["transfer_bytes"] is None
    assert not local.metric["link_simulated"]


def test_a_sim_device_behind_a_link_really_waits() -> None:
    import time

    from models.transfer import Link

    sim = get_runtime("sim", "h100", noise_sigma=0.0)
    start = time.perf_counter()
    result = perform(route(), sim, device_id="d", limits=WorkloadLimits(),
                     link=Link(rtt_ms=30.0, bandwidth_mbit_s=1000.0))
    elapsed_ms = (time.perf_counter() - start) * 1e3
    assert result.metric["transfer_ms"] == pytest.approx(30.0, abs=3.0)
    assert elapsed_ms >= 29.0 and result.metric["simulated"] and result.metric["link_simulated"]


def test_a_real_runtime_with_a_power_model_reports_modelled_energy(numpy_rt: Runtime) -> None:
    from models.devices import DEVICE_CATALOG

    rt = get_runtime("numpy", "cpu", threads=1)
    rt.power_model = DEVICE_CATALOG["cpu-core"]
    m = run(rt, route(seed=2)).metric
    if numpy_rt.meter.sample() is None:  # no readable counter here: modelled, and flagged
        assert m["energy_j"] > 0 and m["energy_simulated"]
    assert not run(numpy_rt, route(seed=2)).metric["energy_simulated"]


def test_a_route_parsed_by_batch_key_is_not_parsed_again(numpy_rt: Runtime,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor hands ``perform`` what ``batch_key`` parsed while planning: the same
    outcome and metric as parsing the route, without parsing it a second time."""
    import runtimes.work as work

    r = route(seed=4, return_output=True)
    keyed = batch_key(r, numpy_rt, WorkloadLimits())
    assert keyed is not None
    plain = run(numpy_rt, r)

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("parsed again")

    monkeypatch.setattr(work, "parse_workload", refuse)
    given = run(numpy_rt, r, parsed=keyed[1])
    timing = {"exec_ms", "latency_ms", "cpu_ms", "setup_ms", "energy_j", "held_ms"}
    assert {k: v for k, v in given.outcome.items() if k not in timing} == {
        k: v for k, v in plain.outcome.items() if k not in timing}
    assert {k: v for k, v in given.metric.items() if k not in timing} == {
        k: v for k, v in plain.metric.items() if k not in timing}
    assert given.outcome["status"] == "ok"


def test_a_workload_that_fails_to_parse_reports_its_parsed_variant(numpy_rt: Runtime) -> None:
    """The variant parsed before the workload failed is what the metric carries (normalised,
    as for a workload that ran), not the route's raw variant."""
    from models.ops import Variant

    r = {**route(), "variant": {"precision": "fp32"},
         "workload": {"id": "w1", "op": {**OP, "m": 0}, "precisions": ["fp32"]}}
    result = run(numpy_rt, r)
    assert result.outcome["status"] == "error"
    assert result.metric["variant"] == Variant.from_dict({"precision": "fp32"}).to_dict()
