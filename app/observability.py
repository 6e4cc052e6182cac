"""Process-local counters and gauges, exported at /metrics in Prometheus' text format.

Counters restart at zero with the process, as Prometheus counters do (``rate()`` handles
resets); durable figures (results, dead letters) are on their topics.
"""

from __future__ import annotations

import threading
from collections import defaultdict

_lock = threading.Lock()
_counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
_gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
HELP: dict[str, str] = {
    "switchyard_decisions_total": "Routing decisions emitted, by device class, policy and reason.",
    "switchyard_results_total": "Results published on switchyard.results, by class and status.",
    "switchyard_duplicates_suppressed_total": "Duplicate deliveries dropped, by stage.",
    "switchyard_deadletters_total": "Messages rejected to switchyard.deadletter, by stage.",
    "switchyard_reroutes_total": "Workloads routed again after their device class died.",
    "switchyard_metrics_learned_total": "Execution metrics folded into cost models, by class.",
    "switchyard_model_error_ratio": "Median absolute relative error of a class's cost model "
                                    "(progressive validation).",
    "switchyard_backlog_ms": "Predicted milliseconds of routed, unfinished work, by class.",
    "switchyard_live_devices": "Devices with a recent heartbeat, by class.",
}


def _key(name: str, labels: dict[str, str] | None) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted((labels or {}).items()))


def inc(name: str, amount: float = 1.0, **labels: str) -> None:
    """Add ``amount`` to a counter."""
    with _lock:
        _counters[_key(name, labels)] += amount


def set_gauge(name: str, value: float, **labels: str) -> None:
    """Set a gauge's current value."""
    with _lock:
        _gauges[_key(name, labels)] = value


def counter_value(name: str, **labels: str) -> float:
    """A counter's value (summed over label sets when ``labels`` is empty)."""
    with _lock:
        if labels:
            return _counters.get(_key(name, labels), 0.0)
        return sum(v for (n, _), v in _counters.items() if n == name)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_prometheus() -> str:
    """All counters and gauges in the Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []
    with _lock:
        series = [(k, v, "counter") for k, v in _counters.items()]
        series += [(k, v, "gauge") for k, v in _gauges.items()]
    seen: set[str] = set()
    for (name, labels), value, kind in sorted(series, key=lambda s: (s[0][0], s[0][1])):
        if name not in seen:
            seen.add(name)
            lines.append(f"# HELP {name} {HELP.get(name, name)}")
            lines.append(f"# TYPE {name} {kind}")
        label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
        lines.append(f"{name}{{{label_text}}} {value:.17g}" if label_text else f"{name} {value:.17g}")
    return "\n".join(lines) + "\n"
