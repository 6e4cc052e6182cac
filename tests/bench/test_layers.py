"""The layer benchmark's bookkeeping (bench/layers.py): passes, the fastest option, judging."""

from __future__ import annotations

from bench.layers import fastest, judge, load_layers, option_key, passes, probes_sent
from models.ops import Variant, parse_op

OP = {"kind": "matmul", "m": 64, "k": 64, "n": 64, "dtype": "float32"}
KEY = parse_op(OP).signature()
TABLE = {"torch-cpu-x86": {f"{KEY}|fp32/eager": 1.0, f"{KEY}|bf16/eager": 0.5},
         "jax-cpu-x86": {f"{KEY}|fp32/eager": 0.6, f"{KEY}|fp32/compiled": 0.55}}


def test_every_pass_holds_each_layer_once_in_its_own_order() -> None:
    layers = load_layers()
    assert len(layers) > 40
    trace = passes(layers, 3, seed=1)
    assert len(trace) == 3 * len(layers) and len({w["id"] for w in trace}) == len(trace)
    first, second = trace[:len(layers)], trace[len(layers):2 * len(layers)]
    assert sorted(w["layer"] for w in first) == sorted(w["id"] for w in layers)
    assert [w["layer"] for w in first] != [w["layer"] for w in second]


def test_the_fastest_option_respects_the_accepted_precisions() -> None:
    op = parse_op(OP)
    assert fastest(TABLE, op, ["fp32", "bf16"]) == ("torch-cpu-x86", "bf16/eager", 0.5)
    assert fastest(TABLE, op, ["fp32"]) == ("jax-cpu-x86", "fp32/compiled", 0.55)
    assert option_key(op, Variant("fp32", "compiled")) == f"{KEY}|fp32/compiled"


def test_a_choice_is_right_within_fifteen_percent_and_late_is_the_second_half() -> None:
    workloads = [{"id": f"w{i}", "layer": "l", "op": OP, "precisions": ["fp32"]}
                 for i in range(4)]
    results = {"w0": {"status": "ok", "device_class": "torch-cpu-x86", "latency_ms": 2.0,
                      "variant": {"precision": "fp32", "mode": "eager"}},
               "w1": {"status": "ok", "device_class": "jax-cpu-x86", "latency_ms": 0.6,
                      "variant": {"precision": "fp32", "mode": "eager"}},
               "w2": {"status": "error", "device_class": "jax-cpu-x86",
                      "variant": {"precision": "fp32", "mode": "eager"}},
               "w3": {"status": "ok", "device_class": "jax-cpu-x86", "latency_ms": 0.55,
                      "variant": {"precision": "fp32", "mode": "compiled"}}}
    rows = {r["id"]: r for r in judge(workloads, results, TABLE)}
    assert set(rows) == {"w0", "w1", "w3"}  # the error is not judged
    assert not rows["w0"]["right"] and rows["w0"]["regret"] == 1.0 / 0.55
    assert rows["w1"]["right"]  # 0.6 <= 1.15 x 0.55
    assert rows["w3"]["right"] and rows["w3"]["late"] and not rows["w1"]["late"]
    assert rows["w0"]["measured_ms"] == 2.0


def test_probes_are_counted_from_the_worker_metrics() -> None:
    text = ("# HELP switchyard_probes_total probes\n"
            'switchyard_probes_total{device_class="a"} 3.0\n'
            'switchyard_probes_total{device_class="b"} 2.0\n'
            'switchyard_decisions_total{device_class="a"} 9.0\n')
    assert probes_sent(text) == 5


def test_layers_whose_fastest_option_differs_between_the_profiles_are_counted() -> None:
    from bench.layers import profiles_disagree

    layers = [{"id": "l", "op": OP, "precisions": ["fp32", "bf16"]},
              {"id": "m", "op": OP, "precisions": ["fp32"]}]
    rounds = {"torch-cpu-x86": {f"{KEY}|fp32/eager": 0.4, f"{KEY}|bf16/eager": 0.5},
              "jax-cpu-x86": {f"{KEY}|fp32/eager": 0.6, f"{KEY}|fp32/compiled": 0.55}}
    assert profiles_disagree(layers, TABLE, TABLE) == 0
    # bf16 was fastest back to back; interleaved, torch's fp32 is (both layers change).
    assert profiles_disagree(layers, TABLE, rounds) == 2


def test_the_interleaved_profile_times_every_option_once_per_round() -> None:
    """The profiling child (its own process: it pins itself to one core), on NumPy (fast):
    both columns cover the same options, each a positive median."""
    from bench.fleets import live_profiles

    ops = [parse_op(OP), parse_op({"kind": "softmax", "rows": 8, "dim": 32})]
    back_to_back, rounds = live_profiles(["numpy"], ops, ["fp32"], 3, handling=False,
                                         interleaved=True)
    assert set(back_to_back) == set(rounds) == {"numpy-cpu-x86"}
    assert set(back_to_back["numpy-cpu-x86"]) == set(rounds["numpy-cpu-x86"])
    assert len(rounds["numpy-cpu-x86"]) == 2
    assert all(ms > 0 for ms in rounds["numpy-cpu-x86"].values())
    assert live_profiles(["numpy"], ops, ["fp32"], 2, handling=False)[1] == {}


def test_the_held_profile_times_an_executors_whole_route_of_each_option(monkeypatch) -> None:
    """``held``: what an executor holds a route of each option for (inputs, conversions,
    execution, checksum): the profiling child covers the same options as the execution
    alone; and each timed route includes what the executor does around the execution. That
    is checked with the checksum slowed by a sleep, not by comparing two profiles' times:
    taken in two processes at different moments, they crossed when other work shared the
    core (CI, 2026-12-08: the execution alone read 9.98 ms, its median of 9, the whole route
    8.47)."""
    import time as clock

    from bench import fleets
    from bench.fleets import live_profiles
    from runtimes import get_runtime, work

    ops = [parse_op({"kind": "softmax", "rows": 512, "dim": 2048})]
    executed, _ = live_profiles(["numpy"], ops, ["fp32"], 3, handling=False)
    held, _ = live_profiles(["numpy"], ops, ["fp32"], 3, held=True)
    assert set(held["numpy-cpu-x86"]) == set(executed["numpy-cpu-x86"])
    assert all(ms > 0 for ms in held["numpy-cpu-x86"].values())

    original, calls = work.checksum, []

    def slow_checksum(output):  # noqa: ANN001, ANN202
        calls.append(1)
        clock.sleep(0.03)
        return original(output)

    monkeypatch.setattr(work, "checksum", slow_checksum)
    runtime = get_runtime("numpy", "cpu", threads=1)
    assert fleets.held_ms(runtime, ops[0], Variant("fp32", "eager"), 3) >= 30.0
    assert len(calls) == 4  # a warm-up route and three timed ones, each checksummed
