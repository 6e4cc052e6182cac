"""River-style contract checks run against EVERY cost model and EVERY policy.

Cost models: predict before learn works on a fresh model; predicting changes nothing; inputs
are never mutated; the state survives to_dict -> JSON -> from_dict with identical predictions,
also after further learning; clones are independent. Policies: the same, plus determinism
given the rng and never picking outside the offered candidates.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable

import numpy as np
import pytest

from models.costmodel import CostModelLike
from models.costmodels import cost_model_from_dict, make_cost_model
from models.decision import Candidate
from models.devices import DEVICE_CATALOG, roofline_seconds
from models.history import HistoryModel
from models.ops import OpSpec, Variant
from models.policy import POLICY_NAMES, make_policy, policy_from_dict
from models.workload import Workload
from tests.models._cost_fixtures import random_mixed_ops

MODEL_FACTORIES: dict[str, Callable[[], CostModelLike]] = {
    "blr-sim": lambda: make_cost_model("blr", "sim-h100"),
    "blr-live": lambda: make_cost_model("blr", "torch-cpu-x86"),
    "sgd": lambda: make_cost_model("sgd", "numpy-cpu-x86"),
    "history": lambda: make_cost_model("history", "sim-l4"),
    "powerlaw": lambda: make_cost_model("powerlaw", "jax-cpu-x86"),
}
VARIANTS = (Variant("fp32"), Variant("bf16"))


def _rows(seed: int, n: int, energy: bool = True) -> list:
    rng = np.random.default_rng(seed)
    rows = []
    for op in random_mixed_ops(rng, n):
        v = VARIANTS[int(rng.integers(2))]
        t = roofline_seconds(DEVICE_CATALOG["l4"], op, v) * 1e3 * math.exp(rng.normal(0, 0.1))
        rows.append((op, v, t, 40.0 * t / 1e3 if energy and rng.random() < 0.7 else None))
    return rows


def _predictions(model: CostModelLike, rows: list) -> list:
    return [model.predict_one(op, v) for op, v, _, _ in rows]


def _state(model: CostModelLike) -> str:
    return json.dumps(model.to_dict(), sort_keys=True)


@pytest.fixture(params=sorted(MODEL_FACTORIES))
def model(request: pytest.FixtureRequest) -> CostModelLike:
    return MODEL_FACTORIES[request.param]()


def test_predict_before_learn_on_a_fresh_model(model: CostModelLike) -> None:
    assert isinstance(model, CostModelLike)
    assert model.samples == 0 and model.version == 0
    for op, v, _, _ in _rows(0, 10):
        pred = model.predict_one(op, v)
        assert math.isfinite(pred.mean_ms) and pred.mean_ms > 0
        assert math.isfinite(pred.std_ms) and pred.std_ms >= 0
        assert pred.samples == 0
        draw = model.sample_ms(op, v, np.random.default_rng(0))
        assert math.isfinite(draw) and draw > 0


def test_predicting_and_sampling_change_nothing(model: CostModelLike) -> None:
    rows = _rows(1, 30)
    model.learn_many(rows[:20])
    before = _state(model)
    _predictions(model, rows)
    for op, v, _, _ in rows:
        model.sample_ms(op, v, np.random.default_rng(1))
    assert _state(model) == before


def test_learning_never_mutates_inputs(model: CostModelLike) -> None:
    rows = _rows(2, 25)
    snapshot = copy.deepcopy(rows)
    model.learn_many(rows)
    op, v, t, e = rows[0]
    model.learn_one(op, v, t, e)
    assert rows == snapshot


def test_versions_and_sample_counts(model: CostModelLike) -> None:
    rows = _rows(3, 12)
    model.learn_many(rows[:10])
    model.learn_one(*rows[10])
    model.learn_many([])
    assert model.samples == 11 and model.version == 2
    summary = model.error_summary()
    assert summary["count"] == 11 and summary["median_ape"] is not None


def test_state_round_trips_through_json_with_identical_predictions(model: CostModelLike) -> None:
    probe = _rows(4, 15)
    fresh = cost_model_from_dict(json.loads(json.dumps(model.to_dict())))
    assert _predictions(fresh, probe) == _predictions(model, probe)
    model.learn_many(_rows(5, 40))
    restored = cost_model_from_dict(json.loads(json.dumps(model.to_dict())))
    assert type(restored) is type(model)
    assert _predictions(restored, probe) == _predictions(model, probe)
    assert restored.version == model.version and restored.samples == model.samples
    more = _rows(6, 20)
    model.learn_many(more)
    restored.learn_many(more)
    assert _predictions(restored, probe) == _predictions(model, probe)
    assert _state(restored) == _state(model)


def test_clones_are_independent(model: CostModelLike) -> None:
    probe = _rows(7, 10)
    model.learn_many(_rows(8, 30))
    clone = model.clone()
    assert _predictions(clone, probe) == _predictions(model, probe)
    before = _state(model)
    clone.learn_many(_rows(9, 30))
    assert _state(model) == before
    assert _predictions(clone, probe) != _predictions(model, probe)


def test_history_model_contract() -> None:
    history = HistoryModel()
    rows = _rows(10, 30)
    snapshot = copy.deepcopy(rows)
    history.observe_many("sim-l4", rows)
    assert rows == snapshot
    restored = HistoryModel.from_dict(json.loads(json.dumps(history.to_dict())))
    assert restored.to_dict() == history.to_dict()
    clone = history.clone()
    clone.observe_many("sim-l4", _rows(11, 10))
    assert history.to_dict() == restored.to_dict()


# -- policies ---------------------------------------------------------------------------------
CLASSES = ("sim-h100", "sim-l4", "sim-cpu-core", "torch-cpu-x86")


def _true_ms(device_class: str, op: OpSpec, variant: Variant) -> float:
    name = device_class.removeprefix("sim-")
    dev = DEVICE_CATALOG.get(name, DEVICE_CATALOG["cpu-core"])
    precision = variant if dev.supports(variant.precision) else Variant("fp32")
    return roofline_seconds(dev, op, precision) * 1e3


def _policy(name: str):
    if name == "oracle":
        return make_policy(
            name, true_ms=_true_ms, true_energy_j=lambda c, o, v: _true_ms(c, o, v) * 0.1
        )
    if name == "static":
        return make_policy(name, device_class="sim-l4")
    return make_policy(name)


def _extra(name: str) -> dict:
    return (
        {"true_ms": _true_ms, "true_energy_j": lambda c, o, v: _true_ms(c, o, v) * 0.1}
        if name == "oracle"
        else {}
    )


def _scenario(seed: int, n: int):
    """n (workload, candidates) pairs with random classes, variants, backlogs and objectives."""
    rng = np.random.default_rng(seed)
    out = []
    objectives = (
        {"latency": 1.0, "energy": 0.0},
        {"latency": 0.0, "energy": 1.0},
        {"latency": 0.5, "energy": 0.5},
    )
    for i, op in enumerate(random_mixed_ops(rng, n)):
        precisions = ("fp32", "bf16") if rng.random() < 0.5 else ("fp32",)
        deadline = None if rng.random() < 0.5 else float(rng.uniform(0.01, 5.0))
        w = Workload(
            id=f"w{i}",
            op=op,
            precisions=precisions,
            deadline_ms=deadline,
            objective=objectives[int(rng.integers(3))],
        )
        classes = [c for c in CLASSES if rng.random() < 0.7] or [CLASSES[0]]
        offered = [
            Candidate(c, v, int(rng.integers(1, 4)), float(rng.exponential(1.0)))
            for c in classes
            for v in VARIANTS
        ]
        out.append((w, offered))
    return out


def _trained_state():
    models = {c: make_cost_model("blr", c) for c in CLASSES[:3]}
    history = HistoryModel(calibrate_minimum=2)
    for c, m in models.items():
        rows = [
            (op, v, _true_ms(c, op, v), 0.1 * _true_ms(c, op, v)) for op, v, _, _ in _rows(12, 40)
        ]
        m.learn_many(rows)
        history.observe_many(c, rows)
    return models, history


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_policy_decides_on_a_fresh_setup(name: str) -> None:
    for workload, offered in _scenario(20, 10):
        d = _policy(name).decide(workload, offered, {}, None, np.random.default_rng(0))
        assert d.reason in ("explore", "exploit", "fallback")
        assert math.isfinite(d.predicted_ms) and math.isfinite(d.score)
        json.dumps(d.to_dict())


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_policy_never_mutates_inputs_and_picks_only_offered(name: str) -> None:
    models, history = _trained_state()
    policy, rng = _policy(name), np.random.default_rng(1)
    states = {c: _state(m) for c, m in models.items()}
    history_state = json.dumps(history.to_dict(), sort_keys=True)
    for workload, offered in _scenario(21, 40):
        w_copy, offered_copy = copy.deepcopy(workload), copy.deepcopy(offered)
        d = policy.decide(workload, offered, models, history, rng)
        assert workload == w_copy and offered == offered_copy
        assert dict(workload.objective) == dict(w_copy.objective)
        assert any(c.device_class == d.device_class and c.variant == d.variant for c in offered)
        assert d.variant.precision in workload.precisions
    assert {c: _state(m) for c, m in models.items()} == states
    assert json.dumps(history.to_dict(), sort_keys=True) == history_state


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_policy_is_deterministic_given_the_rng(name: str) -> None:
    models, history = _trained_state()
    runs = []
    for _ in range(2):
        policy, rng = _policy(name), np.random.default_rng(7)
        runs.append([policy.decide(w, o, models, history, rng) for w, o in _scenario(22, 30)])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_policy_state_round_trips_through_json(name: str) -> None:
    models, history = _trained_state()
    scenario = _scenario(23, 30)
    policy = _policy(name)
    warm = np.random.default_rng(3)
    for w, o in scenario[:7]:
        policy.decide(w, o, models, history, warm)
    restored = policy_from_dict(json.loads(json.dumps(policy.to_dict())), **_extra(name))
    assert restored.name == policy.name == name
    a, b = np.random.default_rng(4), np.random.default_rng(4)
    for w, o in scenario[7:]:
        assert restored.decide(w, o, models, history, b) == policy.decide(w, o, models, history, a)
