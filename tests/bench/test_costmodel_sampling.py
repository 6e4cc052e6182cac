"""The cost-model benchmark's sampling comparison (bench/costmodel_sampling.py), on synthetic
measurements: the informative arm learns exactly its rows, favours options it has not learned,
and both arms are scored on every unseen set."""

from __future__ import annotations

import numpy as np

from bench.costmodel_sampling import compare_sampling, informative_model, sampling_table
from bench.costmodel_scoring import seen_truth, split_measurements
from models.ops import Variant, parse_op

CLASS = "numpy-cpu-x86"


def synthetic(shapes: int = 40) -> tuple[list, list[dict]]:
    """Matmuls of growing size, timed as flops / 5 GFLOP/s with a little noise."""
    rng = np.random.default_rng(0)
    ops = [parse_op({"kind": "matmul", "m": 16 * (i + 1), "k": 64, "n": 64})
           for i in range(shapes)]
    measured = [{"class": CLASS, "shape": i, "variant": Variant("fp32").to_dict(),
                 "times_ms": list(2 * op.m * 64 * 64 / 5e6 * rng.lognormal(0, 0.05, 4))}
                for i, op in enumerate(ops)]
    return ops, measured


def test_the_informative_arm_learns_its_rows_and_covers_unlearned_options_first() -> None:
    ops, measured = synthetic()
    options, _ = split_measurements(measured, ops, {"held_out": set(range(0, 40, 4))})
    rows = options[CLASS]
    assert len(rows) == 30
    model, order = informative_model(CLASS, rows, size=55, rng=np.random.default_rng(1))
    assert model.samples == len(order) == 55
    first, informed = order[:25], order[25:]
    # Every option the random start missed is chosen before any option is chosen again.
    missed = set(range(30)) - set(first)
    assert missed and set(informed[:len(missed)]) == missed
    assert len(set(informed[:25])) == 25  # a round takes distinct options
    assert set(order) == set(range(30))


def test_both_arms_are_scored_on_every_unseen_set() -> None:
    ops, measured = synthetic()
    sets = {"held_out": set(range(0, 40, 4)), "layers": {39}}
    options, truth = split_measurements(measured, ops, sets)
    scores = compare_sampling(options, truth, ops, size=60, draws=2, seed=3)
    assert set(scores) == {"held_out", "layers"}
    for arms in scores.values():
        assert set(arms) == {"random", "informative"}
        assert all(s["draws"] == 2 and s["median_ape"] >= 0.0 for s in arms.values())
    assert scores["held_out"]["random"]["shapes"] == 2 * 10  # 10 held-out shapes per draw
    assert "| real model layers | informative |" in sampling_table(scores, 60, 2)


def test_seen_shapes_are_scored_on_their_own_medians() -> None:
    ops, measured = synthetic()
    held = set(range(0, 40, 4))
    options, _ = split_measurements(measured, ops, {"held_out": held})
    truth = seen_truth(options, ops)
    assert set(truth) == set(range(40)) - held
    assert truth[1][(CLASS, "fp32", "eager")] == float(np.median(measured[1]["times_ms"]))
