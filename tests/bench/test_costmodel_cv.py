"""The cost-model benchmark's other held-out draws (bench/costmodel.py::cross_validate), on
synthetic measurements: each draw holds out its own quarter of the random shapes, every model
is scored on every draw, and the report's table and goal line read them."""

from __future__ import annotations

import numpy as np

from bench.costmodel import cross_validate, cross_validation_table, held_out_split, report
from models.ops import Variant, parse_op

# numpy at 5 GFLOP/s, torch at 10: torch is the fastest (class, variant) of every shape.
SPEEDS = {"numpy-cpu-x86": 5e6, "torch-cpu-x86": 10e6}


def synthetic(shapes: int = 24) -> tuple[list, list[dict]]:
    rng = np.random.default_rng(0)
    ops = [parse_op({"kind": "matmul", "m": 16 * (i + 1), "k": 64, "n": 64})
           for i in range(shapes)]
    measured = [{"class": name, "shape": i, "variant": Variant("fp32").to_dict(),
                 "times_ms": list(2 * op.m * 64 * 64 / speed * rng.lognormal(0, 0.05, 4))}
                for name, speed in SPEEDS.items() for i, op in enumerate(ops)]
    return ops, measured


def test_a_held_out_split_is_a_quarter_drawn_by_its_seed() -> None:
    assert held_out_split(128, 6) == held_out_split(128, 6)
    assert len(held_out_split(128, 6)) == 32
    assert held_out_split(128, 6) != held_out_split(128, 7)


def test_every_model_is_scored_on_every_draw_and_reported() -> None:
    ops, measured = synthetic()
    cv = cross_validate(measured, ops, count=20, seeds=[6, 7], size=40, draws=1)
    assert cv["seeds"] == [6, 7] and cv["size"] == 40
    assert {"switchyard", "sklearn-gbr", "starpu-history"} <= set(cv["models"])
    for scores in cv["models"].values():
        assert len(scores["top1"]) == len(scores["median_ape"]) == 2
    # Torch is twice as fast everywhere: the learned model finds it on every held-out shape.
    assert cv["models"]["switchyard"]["top1"] == [1.0, 1.0]
    table = cross_validation_table(cv, main_seed=5)
    assert "Over 2 other draws (seeds 6–7)" in table
    assert "| switchyard | 100.0 % | 100–100 % |" in table


def test_the_goal_is_met_only_when_the_other_draws_meet_it_too() -> None:
    score = {"median_ape": 10.0, "p90_ape": 30.0, "top1": 0.95, "mean_regret": 1.0,
             "per_class": {}, "misses": 0,
             "misses_within_5pct": 0}
    results = {"machine": {"cpu_model": "x", "cores": 2, "date_utc": "today"}, "shapes": 24,
               "per_kind": 3,
               "held_out": 6, "classes": list(SPEEDS), "repeats": 4, "measure_s": 1.0,
               "models": {"switchyard": {"200": score}},
               "floor": {"median_ape": {"numpy-cpu-x86": 2.0}, "top1": 1.0},
               "cross_validation": {"seeds": [6], "size": 200, "models": {
                   "switchyard": {"top1": [0.7], "median_ape": [12.0]}}}}
    text = report(results, quick=True)
    assert "(the other held-out draws' mean: 12.0 % / 70 %)" in text
    assert ": not met." in text
    results["cross_validation"]["models"]["switchyard"]["top1"] = [0.92]
    assert ": met." in report(results, quick=True)


def test_a_replay_reads_back_an_earlier_runs_shapes_and_measurements(tmp_path) -> None:
    """SWITCHYARD_BENCH_COSTMODEL_REPLAY scores this build's models on a saved run: the
    shapes (random ones, then the layers, in index order), the measurements without their
    op copies and the run's facts come back as that run had them."""
    import json

    from bench.costmodel import replayed

    ops, measured = synthetic(6)
    saved = {"measurements": [{**r, "op": ops[r["shape"]].to_dict()} for r in measured],
             "shapes": 4, "layer_ids": ["bert-a", "bert-b"], "per_kind": 2, "repeats": 4,
             "measure_s": 12.5, "machine": {"date_utc": "2026-12-06 12:46 UTC"}}
    path = tmp_path / "costmodel.json"
    path.write_text(json.dumps(saved))
    rows, shapes, count, layers, facts = replayed(path)
    assert rows == measured and shapes == ops and count == 4
    assert layers == [("bert-a", ops[4]), ("bert-b", ops[5])]
    assert facts["replayed_from"] == str(path) and facts["measure_s"] == 12.5
    assert facts["measured_on"]["date_utc"] == "2026-12-06 12:46 UTC"
