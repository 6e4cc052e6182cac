"""Which prior stds a calibrated live class's cost model should start from, replayed offline.

``python -m bench.prior_stds [priors.json]`` reads the priors benchmark's output (the live CPU
runtimes' calibrations and their one-core profiles of the live mix and the model layers:
``switchyard bench priors``) and, for each runtime's calibrated prior, learns the profiled
times of some options and predicts the others, under each set of stds:

- *unseen kind*: every option of one kind held out, the other kinds learned (the leak of one
  kind's residuals into another through the shared terms);
- *held-out shapes*: 30 % of the ops held out, every kind learned (generalisation within a
  kind), and how often the fastest predicted variant of a held-out op is within 15 % of its
  fastest profiled one;
- both again with every time at twice its profile (a slowdown the calibration did not see).

Rows are learned three times each with 10 % lognormal noise, in a random order, over
``DRAWS`` draws. Errors are median |ln(predicted / profiled)| as a percentage. Pure replay: no
runtime runs.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import REPO

DRAWS = 5
ARMS: dict[str, Mapping[str, float] | None] = {
    "live": {},  # PRIOR_STD["live"] as it is
    "calibrated": None,  # PRIOR_STD["calibrated"] as it is
    "live, bias 0.3": {"bias": 0.3},
    "live, kind 0.8": {"kind": 0.8},
    "live, work 0.02 / hinge 0.01": {"work": 0.02, "hinge": 0.01},
}


def _options(results: Mapping[str, Any]) -> dict[str, tuple[Any, list[tuple[Any, Any, float]]]]:
    """Per device class: its calibrated prior and its profiled (op, variant, ms)."""
    from bench.priors import _calibrations, _ops
    from models.ops import Variant
    from models.priors import prior_for_class

    by_signature = {op.signature(): op for ops in _ops(False).values() for op in ops}
    out = {}
    for row in results["runtimes"].values():
        device_class = row["device_class"]
        prior = prior_for_class(device_class, _calibrations(row)["rates+kernels"])
        options = []
        for profiles in (s["profiles"] for s in results["sets"].values()):
            for key, ms in profiles.get(device_class, {}).items():
                signature, variant = key.split("|")
                precision, mode = variant.split("/")
                options.append((by_signature[signature], Variant(precision, mode), float(ms)))
        out[device_class] = (prior, options)
    return out


def _learned(device_class: str, prior: Any, train: list[tuple[Any, Any, float]],
             rng: np.random.Generator) -> Any:
    from models.costmodel import CostModel

    model = CostModel(device_class, prior)
    rows = [(op, variant, ms * math.exp(rng.normal(0.0, 0.1)), None)
            for _ in range(3) for op, variant, ms in train]
    model.learn_many([rows[i] for i in rng.permutation(len(rows))])
    return model


def replay(results: Mapping[str, Any], stds: Mapping[str, float],
           slowdown: float = 1.0) -> dict[str, float]:
    """Errors (ln units) and the variant picks under ``stds`` for calibrated classes."""
    from models import costmodel

    saved = costmodel.PRIOR_STD["calibrated"]
    costmodel.PRIOR_STD["calibrated"] = dict(stds)
    unseen: list[float] = []
    held_out: list[float] = []
    picks: list[float] = []
    try:
        for draw in range(DRAWS):
            rng = np.random.default_rng(draw)
            for device_class, (prior, options) in _options(results).items():
                options = [(op, v, ms * slowdown) for op, v, ms in options]
                for kind in sorted({op.kind for op, _, _ in options}):
                    model = _learned(device_class, prior,
                                     [o for o in options if o[0].kind != kind], rng)
                    unseen += [abs(model.predict_one(op, v).log_mean - math.log(ms))
                               for op, v, ms in options if op.kind == kind]
                signatures = sorted({op.signature() for op, _, _ in options})
                for _ in range(3):
                    held = set(rng.choice(signatures, size=max(1, len(signatures) * 3 // 10),
                                          replace=False))
                    model = _learned(device_class, prior,
                                     [o for o in options if o[0].signature() not in held], rng)
                    by_op: dict[str, list[tuple[float, float]]] = defaultdict(list)
                    for op, v, ms in options:
                        if op.signature() in held:
                            guess = model.predict_one(op, v).log_mean
                            held_out.append(abs(guess - math.log(ms)))
                            by_op[op.signature()].append((guess, ms))
                    for variants in by_op.values():
                        if len(variants) > 1:
                            fastest = min(ms for _, ms in variants)
                            picks.append(float(min(variants)[1] <= 1.15 * fastest))
    finally:
        costmodel.PRIOR_STD["calibrated"] = saved
    return {"unseen_kind_median": float(np.median(unseen)),
            "unseen_kind_p90": float(np.percentile(unseen, 90)),
            "held_out_median": float(np.median(held_out)),
            "variant_top1": float(np.mean(picks)) if picks else math.nan}


def main(path: Path) -> int:
    from models import costmodel

    results = json.loads(path.read_text())
    live, calibrated = costmodel.PRIOR_STD["live"], costmodel.PRIOR_STD["calibrated"]

    def pct(ln: float) -> str:
        return f"{100 * math.expm1(ln):.1f} %"

    print(f"calibrated priors of {', '.join(results['runtimes'])} from {path} "
          f"(measured {results.get('measured_at', '?')}); {DRAWS} draws")
    print("| stds | slowdown | unseen kind median | unseen kind p90 | held-out shapes median "
          "| variant top-1 |")
    print("|---|---|---|---|---|---|")
    for name, change in ARMS.items():
        stds = calibrated if change is None else {**live, **change}
        for slowdown in (1.0, 2.0):
            r = replay(results, stds, slowdown)
            print(f"| {name} | {slowdown:g}x | {pct(r['unseen_kind_median'])} | "
                  f"{pct(r['unseen_kind_p90'])} | {pct(r['held_out_median'])} | "
                  f"{100 * r['variant_top1']:.1f} % |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "bench/out/priors.json"))
