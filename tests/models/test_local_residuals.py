"""Exact-shape corrections of the cost model (models/local_residuals.py)."""

from __future__ import annotations

import json
import math

import numpy as np

from models.costmodel import CostModel
from models.local_residuals import MAX_KEYS, MAX_WEIGHT, LocalResiduals, local_key
from models.ops import Variant, parse_op
from tests.models._cost_fixtures import random_mixed_ops, roofline_world

FP32 = Variant("fp32")
WORLD = roofline_world(60e9, 15e9, 0.02)
# One shape its class runs 3x slower than its features say (a kernel the runtime picks badly).
ODD = parse_op({"kind": "matmul", "m": 384, "k": 640, "n": 320})


def truth(op, variant) -> float:
    return WORLD(op, variant) * (3.0 if op == ODD else 1.0)


def trained(rows: int = 600, seed: int = 3) -> tuple[CostModel, list]:
    rng = np.random.default_rng(seed)
    ops = random_mixed_ops(rng, 40) + [ODD]
    model = CostModel.for_class("torch-cpu-x86")
    stream = [ops[int(i)] for i in rng.integers(len(ops), size=rows)]
    for start in range(0, rows, 50):
        model.learn_many([(op, FP32, truth(op, FP32) * math.exp(rng.normal(0, 0.05)), None)
                          for op in stream[start:start + 50]])
    return model, ops


def test_a_shape_the_features_miss_is_predicted_from_its_own_measurements() -> None:
    model, _ = trained()
    predicted = model.predict_one(ODD, FP32).mean_ms
    regression = math.exp(model.time.moments(model.features(ODD, FP32))[0])
    assert abs(predicted / truth(ODD, FP32) - 1.0) < 0.15
    assert abs(regression / truth(ODD, FP32) - 1.0) > 0.4  # what the regression alone says
    # Its weight uncertainty shrinks too: it has been measured, not extrapolated.
    x = model.features(ODD, FP32)
    assert model.predict_one(ODD, FP32).param_var < model.time.moments(x)[1]


def test_an_unseen_shape_gets_the_regression_alone() -> None:
    model, _ = trained()
    unseen = parse_op({"kind": "matmul", "m": 390, "k": 640, "n": 320})
    assert model.local.get(local_key(unseen, FP32)) is None
    mu, param_var, noise = model.time.moments(model.features(unseen, FP32))
    prediction = model.predict_one(unseen, FP32)
    assert prediction.log_mean == mu and prediction.param_var == param_var


def test_a_class_wide_slowdown_is_followed_on_corrected_shapes_too() -> None:
    """The corrections are relative to the regression: when the whole class slows 4x and
    the regression follows (its drift detector, on the other shapes), the corrected shape's
    prediction moves with it before that shape is measured again."""
    model, ops = trained()
    before = model.predict_one(ODD, FP32).mean_ms
    assert abs(before / (4.0 * truth(ODD, FP32)) - 1.0) > 0.5  # the slowdown is real
    rng = np.random.default_rng(9)
    errors = []
    for op in [ops[int(i)] for i in rng.integers(len(ops), size=120)]:
        slow = 4.0 * truth(op, FP32)
        if op == ODD:
            errors.append(abs(model.predict_one(op, FP32).mean_ms / slow - 1.0))
        model.learn_one(op, FP32, slow * math.exp(rng.normal(0, 0.05)))
    assert errors and max(errors) < 0.25, errors


def test_keys_are_bounded_weights_capped_and_the_stored_form_predicts_the_same() -> None:
    local = LocalResiduals()
    for i in range(MAX_KEYS + 10):
        local.add(f"k{i}", 1, 0.1)
    assert len(local) == MAX_KEYS and local.get("k0") is None and local.get("k137") is not None
    for _ in range(100):
        local.add("k137", 5, 0.2)
    weight, residual = local.get("k137")
    assert weight <= MAX_WEIGHT and abs(residual - 0.2) < 1e-3
    assert local.correct("nothing", 1.0, 0.5, 0.1) == (1.0, 0.5)
    model, ops = trained(rows=200)
    restored = CostModel.from_dict(json.loads(json.dumps(model.to_dict())))
    for op in ops:
        assert restored.predict_one(op, FP32) == model.predict_one(op, FP32)
