"""Process-local counters and gauges, exported at /metrics in Prometheus' text format.

Counters restart at zero with the process, as Prometheus counters do (``rate()`` handles
resets); durable figures (results, dead letters) are on their topics. Gauges that describe
table state (backlog, live devices, model error) are set by the web view at scrape time from
the tables, so a scrape always shows the state as it is, not as the last agent left it.

Names follow Prometheus' conventions: ``switchyard_`` prefix, snake case, base units in the
name (``_seconds``), ``_total`` on counters only, ``_ratio`` for 0..1 fractions.
"""

from __future__ import annotations

import math
import re
import threading
from collections import defaultdict
from collections.abc import Mapping

Labels = tuple[tuple[str, str], ...]

_lock = threading.Lock()
_counters: dict[tuple[str, Labels], float] = defaultdict(float)
_gauges: dict[tuple[str, Labels], float] = {}
_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

HELP: dict[str, str] = {
    "switchyard_decisions_total": "Routing decisions emitted, by device class, policy and reason.",
    "switchyard_results_total": "Results published on switchyard.results, by class and status.",
    "switchyard_duplicates_suppressed_total": "Duplicate deliveries dropped, by stage.",
    "switchyard_deadletters_total": "Messages rejected to switchyard.deadletter, by stage.",
    "switchyard_reroutes_total": "Workloads routed again after their device class died.",
    "switchyard_metrics_learned_total": "Execution metrics folded into cost models, by class.",
    "switchyard_metric_rows_total": "Execution metrics (rows) the metric stage read, good or bad.",
    "switchyard_metric_stage_cpu_seconds_total": (
        "CPU time of the metric stage's steps (parse, window, learn, tables: the table "
        "writes of window and learn), by step."),
    "switchyard_stage_cpu_seconds_total": (
        "CPU time of the decide and complete stages' batches (with what the event loop ran "
        "while a batch awaited the producer), by stage."),
    "switchyard_stage_batches_total": (
        "Batches the decide and complete stages took from their streams, by stage."),
    "switchyard_stage_records_total": (
        "Records in those batches, by stage (÷ batches: the mean batch size)."),
    "switchyard_skipped_records_recovered_total": (
        "Input records the consumer skipped that a stage read back and processed, by stage."),
    "switchyard_model_error_ratio": "Median absolute relative error of a class's cost model "
                                    "(progressive validation; 0.1 is 10 %).",
    "switchyard_model_samples": "Executions a class's cost model has learned from.",
    "switchyard_backlog_seconds": "Predicted execution time of routed, unfinished work, by class "
                                  "(this worker's partitions).",
    "switchyard_inflight_workloads": "Routed, unfinished workloads, by class "
                                     "(this worker's partitions).",
    "switchyard_live_devices": "Devices with a recent heartbeat, by class.",
    "switchyard_devices": "Devices known to the registry, by class and health.",
    "switchyard_worker_ready": "1 when the worker has its partitions and recovered tables.",
}


STAGE_CPU = "switchyard_stage_cpu_seconds_total"


def count_batch(stage: str, records: int) -> None:
    """A stage took a batch of ``records`` records from its stream."""
    inc("switchyard_stage_batches_total", stage=stage)
    inc("switchyard_stage_records_total", records, stage=stage)


def _key(name: str, labels: Mapping[str, str] | None) -> tuple[str, Labels]:
    if not _NAME_RE.match(name):
        raise ValueError(f"{name!r} is not a valid Prometheus metric name")
    items = tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))
    for label, _ in items:
        if not _LABEL_RE.match(label) or label.startswith("__"):
            raise ValueError(f"{label!r} is not a valid Prometheus label name")
    return name, items


# The checked key of each (name, labels as passed) a counter was increased with: the stages
# count every workload, and checking the names and sorting the labels each time cost more
# than the count. Bounded: cleared when it reaches _KEY_CACHE_SIZE (label values come from
# input, e.g. device classes).
_key_cache: dict[tuple[object, ...], tuple[str, Labels]] = {}
_KEY_CACHE_SIZE = 4096


def inc(name: str, amount: float = 1.0, **labels: str) -> None:
    """Add ``amount`` (>= 0: counters only go up) to a counter."""
    if amount < 0:
        raise ValueError(f"counter {name} cannot decrease (amount {amount})")
    asked = (name, *labels.items())
    key = _key_cache.get(asked)
    if key is None:
        key = _key(name, labels)
        if len(_key_cache) >= _KEY_CACHE_SIZE:
            _key_cache.clear()
        _key_cache[asked] = key
    with _lock:
        _counters[key] += amount


def set_gauge(name: str, value: float, **labels: str) -> None:
    """Set a gauge's current value."""
    key = _key(name, labels)
    with _lock:
        _gauges[key] = float(value)


def replace_gauge(name: str, series: Mapping[Labels, float]) -> None:
    """Set every series of gauge ``name`` at once, dropping series not given.

    Used at scrape time for gauges derived from tables: a device class that disappeared must
    stop being exported rather than keep its last value forever.
    """
    keyed = {_key(name, dict(labels)): float(value) for labels, value in series.items()}
    with _lock:
        for key in [k for k in _gauges if k[0] == name]:
            del _gauges[key]
        _gauges.update(keyed)


def counter_value(name: str, **labels: str) -> float:
    """A counter's value (summed over label sets when ``labels`` is empty)."""
    with _lock:
        if labels:
            return _counters.get(_key(name, labels), 0.0)
        return sum(v for (n, _), v in _counters.items() if n == name)


def counter_by(name: str, label: str) -> dict[str, float]:
    """A counter summed per value of one label (e.g. results per ``status``)."""
    out: dict[str, float] = defaultdict(float)
    with _lock:
        for (n, labels), value in _counters.items():
            if n == name:
                out[dict(labels).get(label, "")] += value
    return dict(out)


def gauge_value(name: str, **labels: str) -> float | None:
    """A gauge's value, None when it was never set."""
    with _lock:
        return _gauges.get(_key(name, labels))


def reset() -> None:
    """Forget every series (tests only: a process's counters never go back to zero)."""
    with _lock:
        _counters.clear()
        _gauges.clear()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    # The exposition format spells the special values this way; repr() would say "inf".
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.17g}"


def render_prometheus() -> str:
    """All counters and gauges in the Prometheus text exposition format (version 0.0.4).

    Series of one metric are grouped under a single HELP and TYPE line, as the format requires.
    """
    with _lock:
        series = [(k, v, "counter") for k, v in _counters.items()]
        series += [(k, v, "gauge") for k, v in _gauges.items()]
    lines: list[str] = []
    seen: set[str] = set()
    for (name, labels), value, kind in sorted(series, key=lambda s: (s[0][0], s[0][1])):
        if name not in seen:
            seen.add(name)
            lines.append(f"# HELP {name} {HELP.get(name, name)}")
            lines.append(f"# TYPE {name} {kind}")
        label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
        sample = f"{name}{{{label_text}}}" if label_text else name
        lines.append(f"{sample} {_number(value)}")
    return "\n".join(lines) + "\n"
