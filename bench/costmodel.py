"""``switchyard bench costmodel``: cost-model accuracy on real CPU measurements, offline.

Random shapes of every op kind are timed in this process on the torch, JAX and NumPy CPU
runtimes (one thread each) in every fp32/bf16 variant they offer, a few repeats each. A
quarter of the shapes are held out. Each model learns N rows per class drawn from the other
shapes' measurements (as an online system sees repeated shapes) and is then scored on the
held-out shapes: absolute % error against the median measured time, and top-1 — whether its
fastest (class, variant) for a shape is the measured fastest.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    fmt,
    machine,
    markdown_table,
    pyplot,
    save_figure,
    section_header,
    summarize,
    update_benchmarks_md,
    write_json,
)
from models.costmodel import CostModelLike, Prediction, Row
from models.costmodels import make_cost_model
from models.features import featurize
from models.ops import OpSpec, Variant, make_inputs, parse_op
from models.priors import prior_for_class

logger = logging.getLogger(__name__)
SAMPLE_SIZES = (50, 200, 1000)
MODEL_NAMES = ("switchyard", "sgd", "starpu-history", "starpu-powerlaw", "sklearn-gbr")
PRECISIONS = ("fp32", "bf16")
RUNTIMES = ("torch", "jax", "numpy")


def _dim(rng: np.random.Generator, lo: float, hi: float) -> int:
    """A log-uniform size between 2^lo and 2^hi (not only powers of two)."""
    return int(round(2 ** rng.uniform(lo, hi)))


def random_op(kind: str, rng: np.random.Generator) -> dict[str, Any]:
    """One random shape of ``kind``, sized to run in microseconds to tens of ms on one core."""
    if kind == "matmul":
        return {"m": _dim(rng, 4, 9), "k": _dim(rng, 4, 9), "n": _dim(rng, 4, 9)}
    if kind == "bmm":
        return {"b": int(rng.choice([2, 4, 8, 16])), "m": _dim(rng, 4, 7),
                "k": _dim(rng, 4, 7), "n": _dim(rng, 4, 7)}
    if kind == "linear":
        return {"batch": _dim(rng, 3, 8), "in_features": _dim(rng, 6, 10),
                "out_features": _dim(rng, 6, 10), "bias": bool(rng.integers(2)),
                "activation": str(rng.choice(["none", "relu", "gelu"]))}
    if kind == "conv2d":
        kernel = int(rng.choice([1, 3]))
        side = _dim(rng, 3, 5)
        return {"batch": int(rng.integers(1, 5)), "in_channels": _dim(rng, 2, 5),
                "out_channels": _dim(rng, 3, 5), "height": side, "width": side,
                "kernel": kernel, "stride": 1, "padding": kernel // 2}
    if kind == "attention":
        return {"batch": int(rng.integers(1, 3)), "heads": int(rng.choice([2, 4])),
                "seq_len": _dim(rng, 5, 8), "head_dim": int(rng.choice([32, 64])),
                "causal": bool(rng.integers(2))}
    if kind in ("layernorm", "softmax"):
        return {"rows": _dim(rng, 5, 11), "dim": _dim(rng, 6, 11)}
    if kind == "mlp":
        return {"batch": _dim(rng, 3, 7), "dims": [_dim(rng, 6, 9) for _ in range(3)],
                "activation": "relu"}
    raise ValueError(kind)


def random_shapes(per_kind: int, seed: int) -> list[OpSpec]:
    """``per_kind`` random shapes of each op kind."""
    rng = np.random.default_rng(seed)
    kinds = ("matmul", "bmm", "linear", "conv2d", "attention", "layernorm", "softmax", "mlp")
    return [parse_op({"kind": kind, **random_op(kind, rng), "dtype": "float32"})
            for kind in kinds for _ in range(per_kind)]


def measure(shapes: list[OpSpec], repeats: int) -> list[dict[str, Any]]:
    """Time every shape in every fp32/bf16 variant of every CPU runtime (one thread)."""
    from runtimes import VariantRefused, get_runtime

    rows = []
    for name in RUNTIMES:
        runtime = get_runtime(name, "cpu", threads=1)
        modes = sorted({(p, m) for _, p, m in runtime.capabilities() if p in PRECISIONS})
        for index, op in enumerate(shapes):
            inputs = make_inputs(op, index)
            for precision, mode in modes:
                variant = Variant(precision, mode)
                try:
                    runtime.execute(op, variant, inputs)  # warm-up / compile
                    times = [runtime.execute(op, variant, inputs).exec_ms for _ in range(repeats)]
                except (VariantRefused, RuntimeError, MemoryError) as exc:
                    logger.info("skip %s %s %s: %s", name, op.kind, variant, exc)
                    continue
                rows.append({"class": runtime.device_class, "shape": index,
                             "variant": variant.to_dict(), "times_ms": times})
    return rows


class OfflineRegressor:
    """A scikit-learn gradient-boosted regressor of ln(ms) on the cost-model features (with the
    class's roofline prior as one of them), fitted once on all the rows it is given."""

    def __init__(self, device_class: str) -> None:
        self.prior = prior_for_class(device_class)
        self.model: Any = None

    def _x(self, op: OpSpec, variant: Variant) -> np.ndarray:
        return featurize(op, variant, self.prior.roofline_log_ms(op, variant))

    def learn_many(self, rows: list[Row]) -> None:
        from sklearn.ensemble import GradientBoostingRegressor

        x = np.array([self._x(op, v) for op, v, _, _ in rows])
        y = np.log(np.maximum([ms for _, _, ms, _ in rows], 1e-6))
        self.model = GradientBoostingRegressor(n_estimators=200, max_depth=3,
                                               learning_rate=0.05, random_state=0).fit(x, y)

    def predict_one(self, op: OpSpec, variant: Variant) -> Prediction:
        log_ms = float(self.model.predict(self._x(op, variant)[None, :])[0])
        return Prediction(math.exp(log_ms), 0.0, None, None, 0, log_ms, 0.0)


def train(name: str, device_class: str, rows: list[Row]) -> CostModelLike | OfflineRegressor:
    """A model of kind ``name`` after learning ``rows`` (online models in batches of 50, as the
    learn stage folds metric batches)."""
    model: Any
    if name == "sklearn-gbr":
        model = OfflineRegressor(device_class)
        model.learn_many(rows)
        return model
    kind = {"switchyard": "blr", "sgd": "sgd", "starpu-history": "history",
            "starpu-powerlaw": "powerlaw"}[name]
    model = make_cost_model(kind, device_class)
    for start in range(0, len(rows), 50):
        model.learn_many(rows[start:start + 50])
    return model


def evaluate(measured: list[dict[str, Any]], shapes: list[OpSpec], held_out: set[int],
             sizes: tuple[int, ...], seed: int) -> dict[str, Any]:
    """APE and top-1 of every model after each training size."""
    rng = np.random.default_rng(seed)
    pool: dict[str, list[Row]] = defaultdict(list)
    truth: dict[int, dict[tuple[str, str, str], float]] = defaultdict(dict)
    for row in measured:
        op, variant = shapes[row["shape"]], Variant.from_dict(row["variant"])
        if row["shape"] in held_out:
            key = (row["class"], variant.precision, variant.mode)
            truth[row["shape"]][key] = float(np.median(row["times_ms"]))
        else:
            pool[row["class"]] += [(op, variant, float(t), None) for t in row["times_ms"]]
    out: dict[str, Any] = {}
    for size in sizes:
        streams = {c: [rows[i] for i in rng.integers(len(rows), size=size)]
                   for c, rows in pool.items()}
        for name in MODEL_NAMES:
            trained = {c: train(name, c, stream) for c, stream in streams.items()}
            ape, hits, regret = [], [], []
            for shape, options in truth.items():
                op = shapes[shape]
                predicted = {}
                for (c, precision, mode), true_ms in options.items():
                    pred = trained[c].predict_one(op, Variant(precision, mode)).mean_ms
                    predicted[(c, precision, mode)] = pred
                    ape.append(100.0 * abs(pred - true_ms) / true_ms)
                pick = min(predicted, key=lambda k: predicted[k])
                best = min(options, key=lambda k: options[k])
                hits.append(pick == best)
                regret.append(options[pick] / options[best])
            stats = summarize(ape)
            out.setdefault(name, {})[str(size)] = {
                "median_ape": stats["p50"], "p90_ape": float(np.percentile(ape, 90)),
                "top1": float(np.mean(hits)), "mean_regret": float(np.mean(regret)),
                "points": len(ape), "shapes": len(hits)}
    return out


def plot(results: dict[str, Any], out_dir: Path) -> Path:
    """Median APE and top-1 accuracy against training samples, per model."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, by_size in results["models"].items():
        sizes = [int(s) for s in by_size]
        ax1.plot(sizes, [by_size[str(s)]["median_ape"] for s in sizes], marker="o", label=name)
        ax2.plot(sizes, [100 * by_size[str(s)]["top1"] for s in sizes], marker="o", label=name)
    for ax, label in ((ax1, "median abs % error, held-out shapes"),
                      (ax2, "top-1 (fastest class, variant) %")):
        ax.set_xscale("log")
        ax.set_xlabel("training samples per class")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    ax1.set_yscale("log")
    ax2.legend(fontsize=8)
    return save_figure(fig, out_dir, "costmodel")


def report(results: dict[str, Any], quick: bool) -> str:
    """The BENCHMARKS.md section."""
    command = "switchyard bench costmodel" + (" --quick" if quick else "")
    parts = [section_header("Cost-model accuracy on real CPU measurements", command,
                            results["machine"], quick)]
    parts.append(
        f"{results['shapes']} random shapes ({results['per_kind']} per op kind), "
        f"{results['held_out']} held out; classes {', '.join(results['classes'])} (one thread "
        f"each), every fp32/bf16 variant they offer, {results['repeats']} timed runs per "
        f"(shape, variant) after a warm-up; {results['measure_s']:.0f} s of measuring. APE is "
        "against the median measured time of held-out shapes; top-1 asks whether the model's "
        "fastest (class, variant) is the measured fastest; regret is the measured time of its "
        "pick over the best. No GPU on this machine.\n")
    rows = []
    for name, by_size in results["models"].items():
        for size, s in by_size.items():
            rows.append([name, size, fmt(s["median_ape"]), fmt(s["p90_ape"]),
                         fmt(100 * s["top1"], ".0f") + " %", fmt(s["mean_regret"], ".2f")])
    parts.append(markdown_table(["model", "samples/class", "median APE %", "p90 APE %",
                                 "top-1", "mean regret"], rows))
    parts.append("\n![costmodel](bench/out/costmodel.png)")
    return "\n\n".join(parts)


def run(quick: bool, out_dir: Path) -> int:
    """Entry point."""
    info = machine()
    per_kind, repeats = (6, 4) if quick else (16, 8)
    shapes = random_shapes(per_kind, seed=3)
    rng = np.random.default_rng(5)
    held_out = {int(i) for i in rng.choice(len(shapes), size=len(shapes) // 4, replace=False)}
    started = time.monotonic()
    measured = measure(shapes, repeats)
    measure_s = time.monotonic() - started
    print(f"[costmodel] measured {len(measured)} (shape, class, variant) in {measure_s:.0f} s",
          flush=True)
    results = {"machine": info, "quick": quick, "per_kind": per_kind, "repeats": repeats,
               "shapes": len(shapes), "held_out": len(held_out), "measure_s": measure_s,
               "classes": sorted({r["class"] for r in measured}),
               "models": evaluate(measured, shapes, held_out, SAMPLE_SIZES, seed=9),
               "measurements": [{**r, "op": shapes[r["shape"]].to_dict()} for r in measured]}
    write_json(out_dir, "costmodel", results)
    plot(results, out_dir)
    update_benchmarks_md("costmodel", report(results, quick))
    for name, by_size in results["models"].items():
        last = by_size[str(SAMPLE_SIZES[-1])]
        print(f"[costmodel] {name:<16} median APE {last['median_ape']:.1f} %  "
              f"top-1 {100 * last['top1']:.0f} %")
    return 0
