"""``switchyard bench layers``: are a real model's layers placed where they run fastest?

The layers of ``traces/model-layers.jsonl`` (BERT, GPT-2, a quarter-width Llama-7B block,
ResNet-50/20 and published MLPs; shapes no benchmark trains on) are profiled first on each CPU
runtime — torch, JAX and NumPy, one thread on one core in a fresh process each, every
fp32/bf16 variant (``fleets.live_profiles``, the execution alone, as executors report it) —
and then played through a worker and the three executors (the executors on one core, the
worker on the others: ``fleets.live_cores``): the layers in a new random
order in every pass, Poisson arrivals at a rate low enough that queues stay short, so the
fastest option is also the right one. Once with idle probes off and once on
(``SWITCHYARD_IDLE_PROBING``, agents/probe.py; its defaults otherwise).

A decision is *right* when the profile's time of the (class, variant) it chose is within 15 %
of the fastest option the workload accepts (issue 13's goal: at least 90 % of the late
decisions). *Late* = the second half of the trace. Regret = the chosen option's profiled time
over the fastest one's. Each arm is judged again against a second profile, the time an
executor holds a route of each option (``fleets.held_ms``: inputs made, the variant's
conversions, execution, checksum), which is what the router's score weighs; on small ops the
two name different fastest options (BENCHMARKS.md, model layers).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bench import fleets
from bench.common import (
    WITHIN,
    fmt,
    machine,
    markdown_table,
    pyplot,
    save_figure,
    section_header,
    update_benchmarks_md,
    write_json,
)
from bench.harness import Run, run_trace, start_cluster
from models.ops import OpSpec, Variant, parse_op
from models.traces import poisson_gaps

WORKDIR = Path(os.environ.get("SWITCHYARD_BENCH_WORKDIR", "/tmp/switchyard-bench")) / "layers"
TRACE = Path(__file__).resolve().parent.parent / "traces" / "model-layers.jsonl"
RATE_PER_S = 4.0
ARMS: tuple[tuple[str, dict[str, str]], ...] = (
    ("probes off", {}),
    ("probes on", {"SWITCHYARD_IDLE_PROBING": "1"}),
)


def load_layers(path: Path = TRACE) -> list[dict[str, Any]]:
    """The trace's workloads, as written."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def passes(layers: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` passes over the layers, each in a new random order, with unique ids."""
    rng = np.random.default_rng(seed)
    out = []
    for p in range(count):
        for i in rng.permutation(len(layers)):
            layer = layers[int(i)]
            out.append({**layer, "id": f"p{p}-{layer['id']}", "layer": layer["id"]})
    return out


def option_key(op: OpSpec, variant: Variant) -> str:
    """The profile's key of an (op, variant) (``fleets.live_profiles``)."""
    return f"{op.signature()}|{variant.precision}/{variant.mode}"


def fastest(table: dict[str, dict[str, float]], op: OpSpec,
            precisions: list[str]) -> tuple[str, str, float] | None:
    """(class, variant key, ms) of the fastest profiled option the workload accepts."""
    prefix = op.signature() + "|"
    best = None
    for device_class, entries in table.items():
        for key, ms in entries.items():
            accepted = key.startswith(prefix) and key[len(prefix):].split("/")[0] in precisions
            if accepted and (best is None or ms < best[2]):
                best = (device_class, key[len(prefix):], float(ms))
    return best


def profiles_disagree(layers: list[dict[str, Any]], table: dict[str, dict[str, float]],
                      rounds: dict[str, dict[str, float]]) -> int:
    """Layers whose fastest accepted (class, variant) differs between the two profiles."""
    count = 0
    for layer in layers:
        op, precisions = parse_op(layer["op"]), list(layer.get("precisions") or ["fp32"])
        first, second = fastest(table, op, precisions), fastest(rounds, op, precisions)
        count += (first and first[:2]) != (second and second[:2])
    return count


def judge(workloads: list[dict[str, Any]], results: dict[str, dict[str, Any]],
          table: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per answered workload: what was chosen, the fastest option, and whether the
    choice was within ``WITHIN`` of it."""
    rows = []
    half = len(workloads) // 2
    for index, workload in enumerate(workloads):
        result = results.get(workload["id"])
        if result is None or result.get("status") != "ok":
            continue
        op = parse_op(workload["op"])
        variant = Variant.from_dict(result["variant"])
        chosen_ms = table.get(result["device_class"], {}).get(option_key(op, variant))
        best = fastest(table, op, list(workload.get("precisions") or ["fp32"]))
        if chosen_ms is None or best is None:
            continue
        rows.append({"id": workload["id"], "layer": workload["layer"], "late": index >= half,
                     "class": result["device_class"], "variant": f"{variant}",
                     "chosen_ms": chosen_ms, "measured_ms": float(result["latency_ms"]),
                     "best_class": best[0], "best_variant": best[1],
                     "best_ms": best[2], "regret": chosen_ms / best[2],
                     "right": chosen_ms <= WITHIN * best[2]})
    return rows


def explain_misses(rows: list[dict[str, Any]], decisions: list[dict[str, Any]],
                   ids: dict[str, str]) -> None:
    """Give each late row that was not right the router's ``compared`` terms for it (from the
    worker's recent decisions; absent where the ring had dropped it): which option it scored
    best, and what it predicted for the option the profile measured fastest."""
    compared = {ids[d["id"]]: d.get("compared") for d in decisions if d.get("id") in ids}
    for row in rows:
        if row["late"] and not row["right"] and compared.get(row["id"]):
            row["compared"] = compared[row["id"]]


def arm_summary(rows: list[dict[str, Any]], run: Run, sent: int, probes: int,
                table_classes: list[str]) -> dict[str, Any]:
    """Late accuracy, regret and class shares of one arm."""
    late = [r for r in rows if r["late"]]
    early = [r for r in rows if not r["late"]]
    chosen = Counter(r["class"] for r in late)
    best = Counter(r["best_class"] for r in late)
    completion = [run.completion_ms(k) for k in run.results if k in run.sent and k in run.received]
    # How the executors' own measurements of what they ran compare with the one-core profile:
    # the router learns from the former and is judged by the latter.
    live_over_profile = {
        c: float(np.median([r["measured_ms"] / r["chosen_ms"] for r in rows if r["class"] == c]))
        for c in table_classes if any(r["class"] == c for r in rows)}
    return {
        "late_right": float(np.mean([r["right"] for r in late])) if late else None,
        "early_right": float(np.mean([r["right"] for r in early])) if early else None,
        "late_regret": float(np.mean([r["regret"] for r in late])) if late else None,
        "late_decisions": len(late),
        "late_chosen_share": {c: chosen[c] / max(len(late), 1) for c in table_classes},
        "late_fastest_share": {c: best[c] / max(len(late), 1) for c in table_classes},
        "results": len(run.results), "sent": sent, "probes": probes,
        "completion_mean_ms": float(np.mean(completion)) if completion else None,
        "live_over_profile": live_over_profile,
    }


def probes_sent(metrics_text: str) -> int:
    """The worker's ``switchyard_probes_total``, summed over classes."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("switchyard_probes_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def run_arm(name: str, env: dict[str, str], workloads: list[dict[str, Any]],
            arrivals: np.ndarray, table: dict[str, dict[str, float]],
            rounds: dict[str, dict[str, float]] | None = None,
            held: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """One arm on a fresh cluster, judged against ``table`` (and, where given, ``rounds``: the
    interleaved profile, and ``held``: the executors' whole time, as other yardsticks)."""
    tag = name.replace(" ", "-")
    mine = [{k: v for k, v in w.items() if k != "layer"} | {"id": f"{tag}-{w['id']}"}
            for w in workloads]
    cluster = start_cluster(WORKDIR / tag, fleets.LIVE_FLEET, {"SWITCHYARD_SEED": "11", **env},
                            worker_cpus=fleets.live_cores()[0])
    try:
        run = run_trace(cluster.namespace, mine, arrivals, 60.0)
        try:
            probes = probes_sent(cluster.local.api_text("/metrics"))
            decisions = json.loads(cluster.local.api_text("/api/decisions?limit=5000"))
        except (OSError, ValueError):
            probes, decisions = -1, {}
    finally:
        threading.Thread(target=cluster.stop, daemon=False).start()
    answered = {w["id"]: run.results[m["id"]] for w, m in zip(workloads, mine, strict=True)
                if m["id"] in run.results}
    rows = judge(workloads, answered, table)
    explain_misses(rows, decisions.get("decisions") or [], {m["id"]: w["id"] for w, m in
                                                            zip(workloads, mine, strict=True)})
    summary = arm_summary(rows, run, len(mine), probes, sorted(table))
    summary["rows"] = rows
    for suffix, other in (("interleaved", rounds), ("held", held)):
        late = [r for r in judge(workloads, answered, other) if r["late"]] if other else []
        summary[f"late_right_{suffix}"] = (float(np.mean([r["right"] for r in late]))
                                           if late else None)
        summary[f"late_regret_{suffix}"] = (float(np.mean([r["regret"] for r in late]))
                                            if late else None)
    print(f"[layers] {name}: late right {fmt(100 * (summary['late_right'] or 0), '.0f')} %, "
          f"regret {fmt(summary['late_regret'], '.2f')}, probes {probes}, results "
          f"{summary['results']}/{summary['sent']}", flush=True)
    return summary


def plot(results: dict[str, Any], out_dir: Path) -> Path:
    """Late decisions per class, chosen by each arm against where the profile is fastest."""
    plt = pyplot()
    classes = results["classes"]
    arms = list(results["arms"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / (len(arms) + 1)
    x = np.arange(len(classes))
    first = results["arms"][arms[0]]
    ax.bar(x, [first["late_fastest_share"][c] for c in classes], width, label="fastest (profile)",
           color="grey")
    for i, arm in enumerate(arms, start=1):
        shares = results["arms"][arm]["late_chosen_share"]
        ax.bar(x + i * width, [shares[c] for c in classes], width, label=f"chosen, {arm}")
    ax.set_xticks(x + width * len(arms) / 2, classes)
    ax.set_ylabel("share of late decisions")
    ax.legend(fontsize=8)
    ax.set_title("Layer trace: where late decisions went")
    return save_figure(fig, out_dir, "layers")


def report(results: dict[str, Any], quick: bool) -> str:
    """The BENCHMARKS.md section."""
    command = "switchyard bench layers" + (" --quick" if quick else "")
    parts = [section_header("Real model layers on the live CPU runtimes", command,
                            results["machine"], quick)]
    parts.append(
        f"{results['layers']} layers of `traces/model-layers.jsonl` (precisions as the trace "
        f"gives them: fp32 and bf16), {results['passes']} passes in a new random order each, "
        f"{results['workloads']} workloads at {fmt(results['rate_per_s'], '.0f')}/s (Poisson), "
        "through one worker and one executor per runtime (torch, JAX, NumPy; one thread each, "
        "the three pinned to one core and the worker to the others). The profile: each runtime in a fresh process on one core, "
        f"{results['repeats']} timed executions of every (layer, variant) after a warm-up "
        f"({fmt(results['profile_s'], '.0f')} s). *Right*: the chosen (class, variant)'s "
        f"profiled time within {fmt(100 * (WITHIN - 1), '.0f')} % of the fastest option the "
        "workload accepts; *late*: the second half of the trace; regret: the chosen option's "
        "profiled time over the fastest's. Probes: `SWITCHYARD_IDLE_PROBING=1` with its "
        "defaults (a class idle 2 s gets at most one probe a second).\n")
    rows = []
    classes = results["classes"]
    def pct(value: float | None) -> str:
        return "–" if value is None else fmt(100 * value, ".0f") + " %"

    for arm, s in results["arms"].items():
        rows.append([arm, pct(s["early_right"]), pct(s["late_right"]),
                     pct(s.get("late_right_interleaved")),
                     pct(s.get("late_right_held")),
                     fmt(s["late_regret"], ".2f"), fmt(s.get("late_regret_held"), ".2f"),
                     ", ".join(f"{c.split('-')[0]} {100 * s['late_chosen_share'][c]:.0f} %"
                               for c in classes),
                     ", ".join(f"{c.split('-')[0]} {v:.2f}"
                               for c, v in s.get("live_over_profile", {}).items()),
                     str(s["probes"]), f"{s['results']}/{s['sent']}",
                     fmt(s["completion_mean_ms"], ".0f")])
    fastest_share = results["arms"][next(iter(results["arms"]))]["late_fastest_share"]
    parts.append(markdown_table(
        ["arm", "first half right", "late right", "late right (interleaved profile)",
         "late right (executor's whole time)", "late regret", "late regret (whole time)",
         "late decisions by class",
         "executions as measured ÷ profile (median)", "probes", "results",
         "mean completion ms"], rows))
    parts.append("Where the profile says the late layers run fastest: " + ", ".join(
        f"{c} {100 * fastest_share[c]:.0f} %" for c in classes) + ".")
    if results.get("profile_interleaved"):
        parts.append(
            "*Interleaved profile*: the same options profiled again in the same processes, "
            f"{results['repeats']} rounds in which every option runs once among the others "
            "(as an executor serving a mix runs them, rather than its own repeats back to "
            "back); it names another fastest option for "
            f"{results.get('profiles_disagree', 0)} of the {results['layers']} layers. The goal "
            "is judged against the first profile.")
    if results.get("profile_held"):
        parts.append(
            "*Executor's whole time*: each option profiled again as an executor runs a route "
            "of it (`fleets.held_ms`: its inputs made from the seed, the variant's conversions, "
            "the execution and the output's checksum; the median of "
            f"{results['repeats']} routes after a warm-up one), what the router's score weighs "
            "(the execution and the class's learned handling, models/handling.py). It names "
            f"another fastest option for {results.get('held_disagrees', 0)} of the "
            f"{results['layers']} layers: where a small op's bf16 or torch execution gains less "
            "than its conversions or per-call cost, the two yardsticks disagree. The goal is "
            "judged against the first.")
    best = max((s["late_right"] or 0.0) for s in results["arms"].values())
    parts.append(f"**Goal** (issue 13: ≥ 90 % of late decisions right): best arm "
                 f"{100 * best:.0f} %: {'met' if best >= 0.9 else 'not met'}.")
    parts.append("\n![layers](bench/out/layers.png)")
    return "\n\n".join(parts)


def run(quick: bool, out_dir: Path) -> int:
    """Entry point."""
    info = machine()
    layers = load_layers()
    count, repeats = (2, 3) if quick else (6, 7)
    ops = list({json.dumps(w["op"], sort_keys=True): parse_op(w["op"]) for w in layers}.values())
    started = time.monotonic()
    # Execution alone: what the executors report and the cost model learns and predicts, and
    # what issue 13's goal names. The router weighs more: the whole time the executor holds
    # the workload (models/handling.py: inputs made, a bf16 variant's conversions, the output's
    # checksum), so where a small op's bf16 gain is less than its conversions the two disagree
    # (BENCHMARKS.md, model layers: most of the late misses at 6a30bce).
    table, rounds = fleets.live_profiles([s.runtime for s in fleets.LIVE_FLEET], ops,
                                         ("fp32", "bf16"), repeats, handling=False,
                                         interleaved=True)
    # And the whole time an executor holds each option's workload (fleets.held_ms: inputs,
    # the variant's conversions, execution, checksum), what the router's score weighs: a
    # second yardstick, reported beside the goal's.
    held, _ = fleets.live_profiles([s.runtime for s in fleets.LIVE_FLEET], ops,
                                   ("fp32", "bf16"), repeats, held=True)
    profile_s = time.monotonic() - started
    print(f"[layers] profiled {len(ops)} layers on {', '.join(sorted(table))} in "
          f"{profile_s:.0f} s", flush=True)
    workloads = passes(layers, count, seed=7)
    arrivals = np.cumsum(poisson_gaps(len(workloads), RATE_PER_S, seed=8))
    arms = {name: run_arm(name, env, workloads, arrivals, table, rounds, held)
            for name, env in ARMS}
    results = {"machine": info, "quick": quick, "layers": len(layers), "passes": count,
               "workloads": len(workloads), "rate_per_s": RATE_PER_S, "repeats": repeats,
               "profile_s": profile_s, "within": WITHIN, "classes": sorted(table),
               "profile": table, "profile_interleaved": rounds, "profile_held": held,
               "profiles_disagree": profiles_disagree(layers, table, rounds),
               "held_disagrees": profiles_disagree(layers, table, held), "arms": arms}
    write_json(out_dir, "layers", results)
    plot(results, out_dir)
    update_benchmarks_md("layers", report(results, quick))
    return 0
