"""Which rows the cost model learns from: as traffic draws them, or chosen as idle probes are.

Part of ``switchyard bench costmodel``, on the same measurements and held-out shapes. Both arms
train the switchyard model (``blr``) on the same number of rows per class:

- *random*: rows drawn from every timed run of the training shapes, with repeats (as in the
  benchmark's main table: what an online system sees from traffic);
- *informative*: the order idle probes use (models/probing.py): a few random rows to start,
  then in rounds of ``ROUND`` rows, the options (shape, variant) never learned first, then the
  largest weight std of ln(ms), each round ``ROUND`` distinct options, each one a random timed
  run of its option. The live probes pick one option at a time among recent shapes; the rounds
  here stand for the learn stage's metric batches.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from bench.common import fmt, markdown_table
from bench.costmodel_scoring import Options, Truth, outcomes, pool_outcomes, train
from models.costmodel import Row
from models.costmodels import make_cost_model
from models.probing import informative_order, weight_std

ARMS = ("random", "informative")
FIRST = 25  # random rows before the first informed round
ROUND = 25


def random_rows(options: list[tuple[Any, Any, list[float]]], size: int,
                rng: np.random.Generator) -> list[Row]:
    flat = [(op, variant, t, None) for op, variant, times in options for t in times]
    return [flat[i] for i in rng.integers(len(flat), size=size)]


def informative_model(device_class: str, options: list[tuple[Any, Any, list[float]]],
                      size: int, rng: np.random.Generator) -> tuple[Any, list[int]]:
    """The switchyard model after ``size`` rows chosen in the probes' order, and the options
    it learned, in order (an index per row)."""
    model = make_cost_model("blr", device_class)
    seen = [False] * len(options)
    order: list[int] = []

    def take(indices: list[int]) -> list[Row]:
        order.extend(indices)
        for i in indices:
            seen[i] = True
        return [(options[i][0], options[i][1],
                 options[i][2][int(rng.integers(len(options[i][2])))], None) for i in indices]

    first = [int(i) for i in rng.integers(len(options), size=min(FIRST, size))]
    model.learn_many(take(first))
    learned = len(first)
    while learned < size:
        scores = [weight_std(model.predict_one(op, variant).param_var)
                  for op, variant, _ in options]
        chosen = informative_order(scores, seen)[:min(ROUND, size - learned)]
        model.learn_many(take(chosen))
        learned += len(chosen)
    return model, order


def compare_sampling(options: Options, truth: Truth, shapes: list[Any], size: int, draws: int,
                     seed: int) -> dict[str, dict[str, Any]]:
    """``{set name: {arm: pooled scores}}`` of the switchyard model after ``size`` rows per
    class chosen by each arm, over ``draws`` draws."""
    rng = np.random.default_rng(seed)
    per_draw: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for _ in range(draws):
        trained = {
            "random": {c: train("switchyard", c, random_rows(rows, size, rng))
                       for c, rows in options.items()},
            "informative": {c: informative_model(c, rows, size, rng)[0]
                            for c, rows in options.items()},
        }
        for arm, models in trained.items():
            for set_name, shapes_truth in truth.items():
                per_draw[(set_name, arm)].append(outcomes(models, shapes, shapes_truth))
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (set_name, arm), results in per_draw.items():
        out[set_name][arm] = pool_outcomes(results)
    return dict(out)


def sampling_table(sampling: dict[str, dict[str, Any]], size: int, draws: int) -> str:
    """The BENCHMARKS.md paragraph and table."""
    names = {"held_out": "held-out random shapes", "layers": "real model layers"}
    rows = []
    for set_name, arms in sampling.items():
        for arm in ARMS:
            s = arms[arm]
            rows.append([names.get(set_name, set_name), arm, fmt(s["median_ape"]),
                         fmt(s["p90_ape"]), fmt(100 * s["top1"], ".0f") + " %",
                         fmt(s["mean_regret"], ".2f")])
    return (f"**Which {size} rows per class: random or informative** (the switchyard model, "
            f"{draws} draws each, same measurements and unseen shapes). *random*: timed runs "
            "drawn as traffic draws them; *informative*: the order idle probes use "
            f"(models/probing.py): {FIRST} random rows, then rounds of {ROUND} options, "
            "never-learned (shape, variant) first, then the largest weight std of ln(ms).\n\n"
            + markdown_table(["unseen set", "rows chosen", "median APE %", "p90 APE %",
                              "top-1", "mean regret"], rows))
