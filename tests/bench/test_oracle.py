"""models.oracle: the true-cost function the oracle policy is fed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from models.devices import DEVICE_CATALOG, roofline_seconds
from models.ops import Variant, parse_op
from models.oracle import load_true_costs, profile_key, true_ms_table
from models.policy import Candidate, make_policy
from models.workload import parse_workload

OP = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64, "dtype": "float32"})
FP32 = Variant("fp32", "eager")


def test_profile_entries_are_returned_exactly(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"true_ms": {"torch-cpu-x86": {profile_key(OP, FP32): 1.25}}}))
    true_ms = load_true_costs(path)
    assert true_ms("torch-cpu-x86", OP, FP32) == 1.25


def test_a_bare_mapping_is_read_too(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"numpy-cpu-x86": {profile_key(OP, FP32): 0.5}}))
    assert load_true_costs(path)("numpy-cpu-x86", OP, FP32) == 0.5


def test_sim_classes_fall_back_on_the_catalog_roofline() -> None:
    true_ms = load_true_costs(None)
    expected = roofline_seconds(DEVICE_CATALOG["h100"], OP, FP32) * 1e3
    assert true_ms("sim-h100", OP, FP32) == pytest.approx(expected)


def test_unknown_live_entries_fall_back_on_a_finite_prior() -> None:
    value = load_true_costs(None)("jax-cpu-x86", OP, Variant("bf16", "compiled"))
    assert math.isfinite(value) and value > 0


@pytest.mark.parametrize("bad", [{"c": {"k": -1}}, {"c": {"k": "x"}}, {"c": 3}, {"true_ms": 1}])
def test_malformed_profiles_are_refused(bad) -> None:
    with pytest.raises((ValueError, TypeError)):
        true_ms_table(bad)


def test_the_oracle_policy_picks_the_truly_fastest_class(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"true_ms": {"numpy-cpu-x86": {profile_key(OP, FP32): 9.0},
                                            "torch-cpu-x86": {profile_key(OP, FP32): 2.0}}}))
    policy = make_policy("oracle", true_ms=load_true_costs(path))
    workload = parse_workload({"id": "w", "op": OP.to_dict()})
    candidates = [Candidate("numpy-cpu-x86", FP32), Candidate("torch-cpu-x86", FP32)]
    decision = policy.decide(workload, candidates, {}, None, np.random.default_rng(0))
    assert decision.device_class == "torch-cpu-x86" and decision.predicted_ms == 2.0
