"""Behaviour of the Bayesian cost model, its regression core, priors and the SGD comparator."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from models.costmodel import CostModel, compare_online
from models.costmodels import cost_model_from_dict, make_cost_model
from models.devices import DEVICE_CATALOG, roofline_seconds
from models.ops import Variant, parse_op
from models.priors import parse_device_class, prior_for_class
from models.regression import BayesLinReg
from models.sgd_model import SGDCostModel
from tests.models._cost_fixtures import random_matmuls, random_mixed_ops, roofline_world

FP32 = Variant("fp32")
CPU_WORLD = roofline_world(60e9, 15e9, 0.02, {"attention": 3.0, "softmax": 2.0, "layernorm": 2.0})


def noisy_rows(ops, true_ms, rng, sigma=0.1, variant=FP32, energy_w=None):
    rows = []
    for op in ops:
        t = true_ms(op, variant) * math.exp(rng.normal(0.0, sigma))
        rows.append((op, variant, t, None if energy_w is None else energy_w * t / 1e3))
    return rows


# -- cold start -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(DEVICE_CATALOG))
def test_cold_start_is_the_roofline_for_sim_classes(name: str) -> None:
    model = CostModel.for_class(f"sim-{name}")
    dev = DEVICE_CATALOG[name]
    for op in random_mixed_ops(np.random.default_rng(0), 20):
        pred = model.predict_one(op, FP32)
        assert pred.mean_ms == pytest.approx(roofline_seconds(dev, op, FP32) * 1e3, rel=1e-9)
        assert pred.samples == 0 and pred.energy_j is None
        assert 0.1 < pred.log_std < 1.0  # unsure, but not uninformative


def test_live_classes_start_from_a_generic_prior_with_wide_uncertainty() -> None:
    op = parse_op({"kind": "matmul", "m": 256, "k": 256, "n": 256})
    cpu = CostModel.for_class("torch-cpu-x86").predict_one(op, FP32)
    gpu = CostModel.for_class("torch-cuda-h200").predict_one(op, FP32)
    sim = CostModel.for_class("sim-h100").predict_one(op, FP32)
    assert gpu.mean_ms < cpu.mean_ms
    assert cpu.log_std > 1.0 > sim.log_std
    # The generic CPU is ~100 GF/s: a 33.5 MFLOP matmul takes ~0.3 ms.
    assert 0.1 < cpu.mean_ms < 1.0


def test_device_class_names_parse() -> None:
    assert parse_device_class("sim-tpu-v5e") == ("sim", "", "tpu-v5e")
    assert parse_device_class("torch-cuda-h200") == ("torch", "cuda", "h200")
    assert parse_device_class("jax-cpu-x86") == ("jax", "cpu", "x86")
    assert prior_for_class("sim-tpu-v5e").device.name == "tpu-v5e"
    assert (
        prior_for_class("torch-cuda-unknownchip").device.peak_flops
        == DEVICE_CATALOG["a100"].peak_flops
    )
    assert prior_for_class("whatever").scale == "live"
    # A precision the device lacks (fp16 on a TPU) still gets a finite prior (fp32 rate).
    op = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64})
    assert math.isfinite(prior_for_class("sim-tpu-v5e").roofline_log_ms(op, Variant("fp16")))


# -- learning -------------------------------------------------------------------------------
def test_running_error_falls_as_samples_arrive() -> None:
    rng = np.random.default_rng(1)
    rows = noisy_rows(random_mixed_ops(rng, 400), CPU_WORLD, rng)
    model = CostModel.for_class("numpy-cpu-x86")
    model.learn_many(rows[:40])
    early = model.error_summary()["median_ape"]
    for start in range(40, 400, 40):
        model.learn_many(rows[start : start + 40])
    late = model.error_summary()
    assert late["count"] == 400 and model.samples == 400 and model.version == 10
    assert late["median_ape"] < 0.5 * early
    assert late["median_ape"] < 15.0  # noise alone is ~6.7% median


def test_follows_a_4x_drift_within_a_few_samples() -> None:
    rng = np.random.default_rng(2)
    ops = random_mixed_ops(rng, 400)
    model = CostModel.for_class("numpy-cpu-x86")
    model.learn_many(noisy_rows(ops[:300], CPU_WORLD, rng, sigma=0.05))

    def slow(op, v):
        return 4.0 * CPU_WORLD(op, v)

    errors = []
    for op, v, t, _ in noisy_rows(ops[300:], slow, rng, sigma=0.05):
        pred = model.predict_one(op, v)
        errors.append(abs(pred.mean_ms - t) / t)
        model.learn_one(op, v, t)
    assert errors[0] > 0.6  # the drift is real
    settled = next(i for i in range(len(errors)) if max(errors[i : i + 10]) < 0.3)
    assert settled <= 10, errors[:20]
    assert model.time.drift_events >= 1


def test_uncertainty_is_calibrated_in_log_space() -> None:
    rng = np.random.default_rng(3)
    rows = noisy_rows(random_mixed_ops(rng, 1200), CPU_WORLD, rng, sigma=0.15)
    result = compare_online(
        {"blr": CostModel.for_class("numpy-cpu-x86")}, rows[:1200], batch_size=25
    )
    assert 0.60 <= result["blr"]["coverage_1sd"] <= 0.76


def test_learn_many_equals_sequential_learning() -> None:
    rng = np.random.default_rng(4)
    rows = noisy_rows(random_mixed_ops(rng, 300), CPU_WORLD, rng, energy_w=30.0)
    batched, sequential = CostModel.for_class("jax-cpu-x86"), CostModel.for_class("jax-cpu-x86")
    for start in range(0, 300, 100):
        batched.learn_many(rows[start : start + 100])
    for row in rows:
        sequential.learn_one(*row)
    # Equal but for the Huber weights of outlying rows (judged a chunk earlier in a batch).
    np.testing.assert_allclose(batched.time.mean, sequential.time.mean, atol=0.02)
    assert batched.time.noise_var == pytest.approx(sequential.time.noise_var, rel=0.25)
    for op, v, _, _ in rows[:20]:
        a, b = batched.predict_one(op, v), sequential.predict_one(op, v)
        assert a.mean_ms == pytest.approx(b.mean_ms, rel=0.03)
        assert a.log_std == pytest.approx(b.log_std, rel=0.15)
        assert a.energy_j == pytest.approx(b.energy_j, rel=0.03)


def test_batch_learning_is_exact_without_outliers() -> None:
    rng = np.random.default_rng(13)
    w = np.array([0.5, 1.0, -0.5, 0.25])
    X = np.column_stack([np.ones(200), rng.normal(size=(200, 3))])
    y = X @ w + rng.normal(scale=0.05, size=200).clip(-0.1, 0.1)
    batched, sequential = (BayesLinReg(np.zeros(4), np.full(4, 2.0), 0.5) for _ in range(2))
    batched.update(X, y)
    for i in range(200):
        sequential.update(X[i : i + 1], y[i : i + 1])
    np.testing.assert_allclose(batched.mean, sequential.mean, rtol=1e-9, atol=1e-12)


def test_energy_is_learned_where_measured() -> None:
    rng = np.random.default_rng(5)
    rows = noisy_rows(random_matmuls(rng, 150), CPU_WORLD, rng, sigma=0.05, energy_w=40.0)
    model = CostModel.for_class("numpy-cpu-x86")
    model.learn_many([(op, v, t, None) for op, v, t, _ in rows[:10]])
    assert model.predict_one(rows[0][0], FP32).energy_j is None and model.energy_samples == 0
    model.learn_many(rows)
    op = rows[0][0]
    pred = model.predict_one(op, FP32)
    assert pred.energy_j == pytest.approx(40.0 * CPU_WORLD(op, FP32) / 1e3, rel=0.2)
    assert pred.energy_std_j is not None and pred.energy_std_j > 0
    assert model.error_summary()["energy_median_ape"] < 15.0


def test_thompson_samples_are_reproducible_and_narrow_with_data() -> None:
    rng = np.random.default_rng(6)
    op = parse_op({"kind": "matmul", "m": 128, "k": 128, "n": 128})
    model = CostModel.for_class("torch-cpu-x86")

    def spread() -> float:
        draws = [model.sample_ms(op, FP32, np.random.default_rng(s)) for s in range(200)]
        return float(np.std(np.log(draws)))

    cold = spread()
    assert model.sample_ms(op, FP32, np.random.default_rng(9)) == model.sample_ms(
        op, FP32, np.random.default_rng(9)
    )
    model.learn_many(noisy_rows(random_matmuls(rng, 200), CPU_WORLD, rng))
    assert spread() < 0.25 * cold


def test_predict_sample_equals_predict_then_sample() -> None:
    rng = np.random.default_rng(14)
    model = CostModel.for_class("numpy-cpu-x86")
    model.learn_many(noisy_rows(random_mixed_ops(rng, 50), CPU_WORLD, rng))
    op = random_mixed_ops(rng, 1)[0]
    pred, draw = model.predict_sample(op, FP32, np.random.default_rng(3))
    assert pred == model.predict_one(op, FP32)
    assert draw == pytest.approx(model.sample_ms(op, FP32, np.random.default_rng(3)), rel=1e-12)


def test_bad_rows_are_refused_before_any_change() -> None:
    model = CostModel.for_class("numpy-cpu-x86")
    op = parse_op({"kind": "softmax", "rows": 8, "dim": 8})
    before = json.dumps(model.to_dict())
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            model.learn_many([(op, FP32, 1.0, None), (op, FP32, bad, None)])
    assert json.dumps(model.to_dict()) == before
    model.learn_one(op, FP32, 1.0, float("nan"))  # unmeasurable energy is "not measured"
    assert model.energy_samples == 0 and model.samples == 1
    model.learn_one(op, FP32, 0.0)  # below the clock's resolution, not an error
    assert model.samples == 2


def test_state_is_small_and_round_trips_through_json() -> None:
    rng = np.random.default_rng(7)
    model = CostModel.for_class("sim-l4")
    model.learn_many(noisy_rows(random_mixed_ops(rng, 200), CPU_WORLD, rng, energy_w=50.0))
    text = json.dumps(model.to_dict())
    # 86 features (format 4): the precision matrix's upper triangle is most of it, ~30 KB
    # per regression (time, energy); format 3's 76 took under 60 KB in all, format 1's 29
    # under 16 KB. Plus the exact-shape corrections of the last 128 shapes measured (~31
    # bytes each).
    assert len(model.local) == 128
    assert len(text) < 75_000
    restored = cost_model_from_dict(json.loads(text))
    assert isinstance(restored, CostModel)
    for op in random_mixed_ops(rng, 10):
        assert restored.predict_one(op, FP32) == model.predict_one(op, FP32)
    assert restored.version == model.version and restored.error_summary() == pytest.approx(
        model.error_summary(), rel=1e-3
    )


# -- the comparator -------------------------------------------------------------------------
def test_bayesian_model_beats_the_sgd_comparator_on_a_roofline_world() -> None:
    rng = np.random.default_rng(8)
    rows = noisy_rows(random_mixed_ops(rng, 500), CPU_WORLD, rng, sigma=0.1)
    models = {
        "blr": make_cost_model("blr", "numpy-cpu-x86"),
        "sgd": make_cost_model("sgd", "numpy-cpu-x86"),
    }
    result = compare_online(models, rows, batch_size=20)
    assert result["blr"]["n"] == result["sgd"]["n"] == 500
    assert result["blr"]["median_ape"] < result["sgd"]["median_ape"]
    assert result["blr"]["log_rmse"] < result["sgd"]["log_rmse"]
    assert models["blr"].samples == 0  # compare_online learns on clones


def test_sgd_comparator_learns_and_round_trips() -> None:
    rng = np.random.default_rng(9)
    rows = noisy_rows(random_mixed_ops(rng, 300), CPU_WORLD, rng, energy_w=30.0)
    model = SGDCostModel.for_class("numpy-cpu-x86")
    for start in range(0, 300, 20):
        model.learn_many(rows[start : start + 20])
    assert model.error_summary()["median_ape"] < 30.0
    restored = cost_model_from_dict(json.loads(json.dumps(model.to_dict())))
    op = rows[0][0]
    assert restored.predict_one(op, FP32) == model.predict_one(op, FP32)
    restored.learn_many(rows[:50])
    model.learn_many(rows[:50])
    assert restored.predict_one(op, FP32) == model.predict_one(op, FP32)


def test_unknown_cost_model_kind() -> None:
    with pytest.raises(ValueError):
        make_cost_model("nope", "x")
    with pytest.raises(ValueError):
        cost_model_from_dict({"kind": "nope"})


# -- the regression core --------------------------------------------------------------------
def _linear_data(rng, n, w, sigma):
    X = np.column_stack([np.ones(n), rng.normal(size=(n, w.size - 1))])
    return X, X @ w + rng.normal(scale=sigma, size=n)


def test_regression_recovers_weights_and_noise() -> None:
    rng = np.random.default_rng(10)
    w = rng.normal(size=6)
    reg = BayesLinReg(np.zeros(6), np.ones(6), 0.5)
    X, y = _linear_data(rng, 2000, w, 0.1)
    for start in range(0, 2000, 50):
        reg.update(X[start : start + 50], y[start : start + 50])
    np.testing.assert_allclose(reg.mean, w, atol=0.03)
    assert math.sqrt(reg.noise_var) == pytest.approx(0.1, rel=0.2)


def test_regression_drift_injection_keeps_the_mean_and_widens_the_bias() -> None:
    rng = np.random.default_rng(11)
    reg = BayesLinReg(np.zeros(4), np.ones(4), 0.5)
    reg.update(*_linear_data(rng, 300, np.array([1.0, 0.5, -0.5, 0.2]), 0.05))
    mean, bias_var = reg.mean.copy(), reg.cov[0, 0]
    reg._inject_bias_variance(1.0)
    np.testing.assert_allclose(reg.mean, mean, atol=1e-9)
    assert reg.cov[0, 0] > 100 * bias_var


def test_regression_unexcited_directions_relax_to_the_prior_not_beyond() -> None:
    rng = np.random.default_rng(12)
    reg = BayesLinReg(np.zeros(3), np.ones(3), 0.5, forgetting=0.9)
    X = np.column_stack([np.ones(500), rng.normal(size=500), np.zeros(500)])
    reg.update(X, X[:, 1] + rng.normal(scale=0.05, size=500))
    prior_var = (1.0 / 0.5) ** 2  # prior std 1 in units of the prior noise 0.5
    assert reg.cov[2, 2] <= prior_var * (1 + 1e-9)  # no wind-up in the unused direction



def test_noisy_rows_never_make_the_weights_less_known_than_the_prior() -> None:
    # Rows that pin down the first two weights, with noise 5x the prior's guess: the third
    # direction is unexcited, and its variance (noise x cov) would be 25x the prior's.
    rng = np.random.default_rng(13)
    prior_std = np.array([1.0, 1.0, 0.3])
    reg = BayesLinReg(np.zeros(3), prior_std, 0.2)
    X = np.column_stack([np.ones(400), rng.normal(size=400), np.zeros(400)])
    reg.update(X, X[:, 1] + rng.normal(scale=1.0, size=400))
    assert reg.noise_var > 10 * 0.2**2  # the noise estimate followed the rows
    x = np.array([1.0, 0.5, 4.0])  # far along the unexcited feature
    _, param_var, noise = reg.moments(x)
    uncapped = noise * float(x @ reg.cov @ x)
    prior_var = float((x * x) @ prior_std**2)
    assert uncapped > 5 * prior_var  # what it reported before the cap
    assert param_var == pytest.approx(prior_var)
    # Where the rows did pin the weights down, the data's (smaller) variance is kept.
    seen = np.array([1.0, 0.5, 0.0])
    assert reg.moments(seen)[1] == pytest.approx(noise * float(seen @ reg.cov @ seen))
    assert reg.moments(seen)[1] < 0.1 * float((seen * seen) @ prior_std**2)

def test_regression_rejects_bad_shapes_and_values() -> None:
    reg = BayesLinReg(np.zeros(3), np.ones(3), 0.5)
    with pytest.raises(ValueError):
        reg.update(np.ones((2, 4)), np.ones(2))
    with pytest.raises(ValueError):
        reg.update(np.ones((1, 3)), np.array([np.nan]))
    with pytest.raises(ValueError):
        BayesLinReg(np.zeros(3), np.zeros(3), 0.5)


def test_remembered_predictions_are_dropped_when_the_model_learns() -> None:
    model = CostModel.for_class("sim-h100")
    op, variant = parse_op({"kind": "matmul", "m": 256, "k": 256, "n": 256}), Variant("fp32")
    cold = model.predict_one(op, variant)
    assert model.predict_one(op, variant) is cold  # remembered for this learned state
    model.learn_one(op, variant, 40.0 * cold.mean_ms)
    learned = model.predict_one(op, variant)
    assert learned.mean_ms > 2.0 * cold.mean_ms and learned.samples == 1
