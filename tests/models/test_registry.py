"""Device liveness and candidate building (pure logic of the registry and decide stages)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from models.registry import candidates_for, device_is_live, live_classes
from models.workload import parse_workload

NOW = 1_000_000.0


def device(device_id, device_class, age_ms=0.0, caps=(("matmul", "fp32", "eager"),), **extra):
    return {"device_id": device_id, "device_class": device_class, "last_seen_ms": NOW - age_ms,
            "capabilities": [list(c) for c in caps], **extra}


def test_liveness_follows_the_timeout_and_a_clean_stop():
    assert device_is_live(device("a", "x-y", age_ms=4999), NOW, 5.0)
    assert not device_is_live(device("a", "x-y", age_ms=5000), NOW, 5.0)
    assert not device_is_live(device("a", "x-y", state="stopping"), NOW, 5.0)
    assert not device_is_live({"device_id": "a"}, NOW, 5.0)


def test_a_class_is_live_while_any_instance_is():
    views = live_classes([device("a", "torch-cpu-x86"), device("b", "torch-cpu-x86", 9000),
                          device("c", "sim-h100", 9000)], NOW, 5.0)
    assert set(views) == {"torch-cpu-x86"}
    assert views["torch-cpu-x86"].live_instances == 1
    assert views["torch-cpu-x86"].device_ids == ("a",)


def test_candidates_only_where_the_class_declared_the_variant():
    caps = (("matmul", "fp32", "eager"), ("matmul", "bf16", "eager"),
            ("matmul", "bf16", "compiled"), ("softmax", "fp32", "eager"))
    views = live_classes([device("a", "jax-cpu-x86", caps=caps),
                          device("b", "numpy-cpu-x86")], NOW, 5.0)
    workload = parse_workload({"id": "w", "op": {"kind": "matmul", "m": 2, "k": 2, "n": 2},
                               "precisions": ["bf16"]})
    found = candidates_for(workload, views, {"jax-cpu-x86": 12.0})
    assert [(c.device_class, c.variant.precision, c.variant.mode) for c in found] == [
        ("jax-cpu-x86", "bf16", "compiled"), ("jax-cpu-x86", "bf16", "eager")]
    assert all(c.backlog_ms == 12.0 for c in found)
    softmax = parse_workload({"id": "s", "op": {"kind": "softmax", "rows": 2, "dim": 2}})
    assert [c.device_class for c in candidates_for(softmax, views, {})] == ["jax-cpu-x86"]


@settings(max_examples=50, deadline=None)
@given(ages=st.lists(st.floats(min_value=0, max_value=20_000), min_size=1, max_size=12))
def test_live_instances_count_exactly_the_fresh_heartbeats(ages):
    devices = [device(f"d{i}", "sim-l4", age) for i, age in enumerate(ages)]
    views = live_classes(devices, NOW, 5.0)
    fresh = sum(1 for age in ages if age < 5000)
    assert (views["sim-l4"].live_instances if views else 0) == fresh
