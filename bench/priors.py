"""How good is a live CPU class's cold prior, before it has learned anything?

``switchyard bench priors``: for each CPU runtime, in a child process pinned to one core with
one thread (as its executor runs), the executor's startup calibration (runtimes/calibrate.py:
the matmul rate per precision and the reference kernels), then a profile of every (op,
variant) of the live scheduling mix and of the model-layers trace (median of a few runs, the
execution alone: what executors report and the cost models learn). Each op is predicted by the
class's cold cost model under four priors: the generic CPU (no calibration), the measured
matmul rates only, the rates with the reference kernels in the cache only, and with the
memory-bound kinds' out-of-cache points too (what executors send now).

Reported per prior: the median and 90th percentile of the factor by which its prediction misses
the measurement (max(pred/true, true/pred)), and for each op and precision set the share where
the prior's fastest (class, variant) is the measured fastest within 15 % (top-1), and the mean
measured time of its pick over the best (regret): a cold router tries first what its prior
ranks first, so a wrong pick on a heavy op is the exploration that stalls a shared core.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    fmt,
    machine,
    machine_line,
    markdown_table,
    now_utc,
    update_benchmarks_md,
    write_json,
)

logger = logging.getLogger(__name__)

RUNTIMES = ("torch", "numpy", "jax")
ARMS = ("generic", "rates", "rates+cached kernels", "rates+kernels")
PRECISION_SETS = (("fp32",), ("fp32", "bf16"))
WITHIN = 1.15


def _child(name: str, ops: Sequence[Any], precisions: Sequence[str], repeats: int) -> dict[str, Any]:
    """In the child: calibrate as the executor does, then profile every option."""
    from bench.fleets import _profile_runtime
    from runtimes import get_runtime
    from runtimes.affinity import isolate
    from runtimes.calibrate import calibrate, calibrate_kernels

    threads, _ = isolate(1, None)
    runtime = get_runtime(name, "cpu", threads=threads)
    began = time.perf_counter()
    rates = calibrate(runtime)
    kernels = calibrate_kernels(runtime)
    seconds = time.perf_counter() - began
    device_class, entries = _profile_runtime(name, ops, precisions, repeats,
                                             handling=False)[:2]
    return {"device_class": device_class, "calibration": rates, "kernel_ms": kernels,
            "calibration_s": seconds, "profile": entries}


def _calibrations(row: Mapping[str, Any]) -> dict[str, Mapping[str, float] | None]:
    """The arms' calibration mappings of one runtime's child output."""
    from models.priors import LARGE, reference_kind
    from models.registry import class_calibration

    rates = dict(class_calibration([{"calibration": row["calibration"]}]))
    full = dict(class_calibration([{"calibration": row["calibration"],
                                    "kernel_ms": row["kernel_ms"]}]))
    # Without the out-of-cache points: what executors sent before they timed them.
    cached = {signature: by for signature, by in (row["kernel_ms"] or {}).items()
              if not str(reference_kind(signature)).endswith(LARGE)}
    in_cache = dict(class_calibration([{"calibration": row["calibration"],
                                        "kernel_ms": cached}]))
    return {"generic": None, "rates": rates, "rates+cached kernels": in_cache,
            "rates+kernels": full}


def _score(rows: Mapping[str, Mapping[str, Any]], ops: Sequence[Any]) -> dict[str, Any]:
    """Per arm: miss factors over every option, top-1 and regret per (op, precision set)."""
    from models.costmodel import CostModel
    from models.ops import Variant
    from models.priors import prior_for_class

    models = {arm: {row["device_class"]: CostModel(row["device_class"], prior_for_class(
        row["device_class"], _calibrations(row)[arm])) for row in rows.values()} for arm in ARMS}
    misses: dict[str, list[float]] = {arm: [] for arm in ARMS}
    options: list[tuple[Any, str, str, float]] = []  # (op, class, variant key, true ms)
    by_signature = {op.signature(): op for op in ops}
    for row in rows.values():
        for key, ms in row["profile"].items():
            signature, variant_key = key.split("|")
            options.append((by_signature[signature], row["device_class"], variant_key,
                            float(ms)))
    predicted: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for op, device_class, variant_key, ms in options:
        precision, mode = variant_key.split("/")
        for arm in ARMS:
            guess = math.exp(models[arm][device_class].predict_one(
                op, Variant(precision, mode)).log_mean)
            predicted[arm].append(guess)
            misses[arm].append(max(guess / ms, ms / guess))
    picks: dict[str, dict[str, list[float]]] = {arm: {"right": [], "regret": []} for arm in ARMS}
    for allowed in PRECISION_SETS:
        for op in ops:
            at = [i for i, (o, _, v, _) in enumerate(options)
                  if o is op and v.split("/")[0] in allowed]
            if len(at) < 2:
                continue
            best = min(options[i][3] for i in at)
            for arm in ARMS:
                pick = min(at, key=predicted[arm].__getitem__)
                picks[arm]["right"].append(float(options[pick][3] <= best * WITHIN))
                picks[arm]["regret"].append(options[pick][3] / best)
    return {arm: {"options": len(options),
                  "miss_median": float(np.median(misses[arm])),
                  "miss_p90": float(np.percentile(misses[arm], 90)),
                  "within_2x": float(np.mean(np.array(misses[arm]) <= 2.0)),
                  "decisions": len(picks[arm]["right"]),
                  "top1": _mean(picks[arm]["right"]),
                  "regret_mean": _mean(picks[arm]["regret"]),
                  "regret_max": max(picks[arm]["regret"], default=None)} for arm in ARMS}


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _ops(quick: bool) -> dict[str, list[Any]]:
    from bench.fleets import LIVE_MIX, distinct_ops
    from bench.layer_shapes import layer_ops
    from models.ops import parse_op

    layers = [parse_op(spec) for _, spec in layer_ops()]
    return {"live mix": distinct_ops(LIVE_MIX),
            "model layers": layers[::4] if quick else layers}


def run(quick: bool, out_dir: Path) -> int:
    info = machine()
    repeats = 3 if quick else 5
    precisions = ("fp32", "bf16")
    results: dict[str, Any] = {"machine": info, "measured_at": now_utc(), "quick": quick,
                               "repeats": repeats, "runtimes": {}, "sets": {}}
    for set_name, ops in _ops(quick).items():
        request = json.dumps({"ops": [op.to_dict() for op in ops], "precisions": precisions,
                              "repeats": repeats})
        rows: dict[str, dict[str, Any]] = {}
        for name in RUNTIMES:
            logger.info("%s: profiling %s (%d ops)", set_name, name, len(ops))
            done = subprocess.run([sys.executable, "-m", "bench.priors", name], input=request,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                logger.warning("%s: %s failed: %s", set_name, name, done.stderr[-1500:])
                continue
            rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
            results["runtimes"].setdefault(name, {
                key: rows[name][key] for key in ("device_class", "calibration", "kernel_ms",
                                                 "calibration_s")})
        results["sets"][set_name] = {"ops": len(ops), "scores": _score(rows, ops),
                                     "profiles": {r["device_class"]: r["profile"]
                                                  for r in rows.values()}}
    write_json(out_dir, "priors", results)
    update_benchmarks_md("priors", _markdown(results, quick))
    return 0


def _markdown(results: Mapping[str, Any], quick: bool) -> str:
    command = "switchyard bench priors" + (" --quick" if quick else "")
    lines = [f"## Cold priors of the live CPU classes\n\nCommand: `{command}` "
             f"({'quick' if quick else 'full'} mode).  \n{machine_line(results['machine'])}\n",
             "Each runtime in a child process pinned to one core with one thread: the "
             "executor's startup calibration (matmul GFLOP/s per precision, then the reference "
             "kernels of models/priors.py::REFERENCE_POINTS within its budget), then every (op, "
             f"variant) of the set in fp32 and bf16, median of {results['repeats']} runs after "
             "a warm-up, the execution alone. Each op is predicted by the class's cold cost "
             "model under four priors: *generic* (no calibration), *rates* (the matmul rates "
             "only, as executors sent before the reference kernels), *rates+cached kernels* "
             "(the reference ops without the memory-bound kinds' out-of-cache points, as "
             "executors sent before those) and *rates+kernels* (what executors send now). "
             "Miss = max(predicted/measured, measured/predicted). Top-1: "
             "for each op and allowed precision set (fp32; fp32 or bf16), whether the prior's "
             "fastest (class, variant) is the measured fastest within 15 %; regret: the measured "
             "time of its pick over the best. No op of either set is one of the reference ops.\n"]
    calibrations = [[name, row["device_class"], fmt(row["calibration_s"], ".1f"),
                     ", ".join(f"{p} {fmt(r, '.1f')}" for p, r in
                               sorted((row["calibration"] or {}).items())),
                     sum(len(v) for v in (row["kernel_ms"] or {}).values())]
                    for name, row in results["runtimes"].items()]
    lines.append(markdown_table(["runtime", "class", "calibration s", "matmul GFLOP/s",
                                 "reference kernels timed"], calibrations))
    for set_name, entry in results["sets"].items():
        rows = [[arm, score["options"], fmt(score["miss_median"], ".2f"),
                 fmt(score["miss_p90"], ".1f"), f"{score['within_2x']:.0%}",
                 score["decisions"], fmt(None if score["top1"] is None else 100 * score["top1"],
                                         ".0f"), fmt(score["regret_mean"], ".2f"),
                 fmt(score["regret_max"], ".1f")]
                for arm, score in entry["scores"].items()]
        lines.append(f"\n**{set_name}** ({entry['ops']} ops)\n")
        lines.append(markdown_table(["prior", "options", "miss median ×", "miss p90 ×",
                                     "within 2×", "decisions", "top-1 %", "mean regret",
                                     "max regret"], rows))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # one runtime's calibration and profile (JSON in and out)
    from models.ops import parse_op

    asked = json.loads(sys.stdin.read())
    print(json.dumps(_child(sys.argv[1], [parse_op(o) for o in asked["ops"]],
                            asked["precisions"], int(asked["repeats"]))))
