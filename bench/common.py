"""What every benchmark shares: the machine description, JSON and PNG output, statistics and
the `BENCHMARKS.md` section updater (one section per benchmark, replaced whole on each run).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = REPO / "BENCHMARKS.md"
MD_TITLE = "# Switchyard benchmarks\n\nRegenerate any section with the command it names; " \
    "JSON and PNG files are under `bench/out/`.\n"


# Issue 13's measure of a routing choice: "right" when the chosen option's time is within 15 %
# of the fastest's (bench/layers.py, and the cost-model benchmark's "pick within 15 %").
WITHIN = 1.15

def _start_marker(name: str) -> str:
    return f"<!-- bench:{name}:start -->"


def _end_marker(name: str) -> str:
    return f"<!-- bench:{name}:end -->"


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> list[str]:
    """NVIDIA GPUs as ``nvidia-smi -L`` lists them (empty without a driver)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(" (UUID")[0] for line in out.stdout.splitlines() if line.strip()]


def machine() -> dict[str, Any]:
    """Cores, CPU model, GPUs, load and date: what a reader needs to weigh the numbers."""
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = []
    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu_model(),
        "gpus": gpu_names(),
        "python": platform.python_version(),
        "load_average_at_start": load,
        "date_utc": now_utc(),
    }


def now_utc() -> str:
    """The time now as the reports print it (``2026-12-04 03:27 UTC``)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def machine_line(info: Mapping[str, Any]) -> str:
    """One Markdown line describing the machine of a run."""
    gpus = ", ".join(info.get("gpus") or []) or "none"
    load = "/".join(str(v) for v in info.get("load_average_at_start") or [])
    return (f"Machine: {info['cores']} cores, {info['cpu_model']}, GPU: {gpus}; "
            f"load average at start {load or 'n/a'}; {info['date_utc']}.")


def write_json(out_dir: Path, name: str, data: Any) -> Path:
    """Write ``out_dir/name.json`` (sorted keys, NaN as null) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(_finite(data), indent=1, sort_keys=True) + "\n")
    return path


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        return _finite(value.item())
    return value


def save_figure(fig: Any, out_dir: Path, name: str) -> Path:
    """Save a matplotlib figure as ``out_dir/name.png`` and close it."""
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --- statistics ----------------------------------------------------------------------------
def summarize(values: Iterable[float]) -> dict[str, float | int | None]:
    """n, mean, p50, p95, p99 and max of ``values`` (None fields when empty)."""
    arr = np.asarray([float(v) for v in values], dtype=float)
    if arr.size == 0:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    return {"n": int(arr.size), "mean": float(arr.mean()),
            "p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
            "p99": float(np.percentile(arr, 99)), "max": float(arr.max())}


def attainment(completion_ms: Sequence[float], deadline_ms: Sequence[float | None]) -> float | None:
    """Share of workloads with a deadline that completed within it (None: no deadlines)."""
    pairs = [(c, d) for c, d in zip(completion_ms, deadline_ms, strict=True) if d is not None]
    if not pairs:
        return None
    return sum(c <= d for c, d in pairs) / len(pairs)


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``, None when either is missing or the reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return float(value) / float(reference)


def fmt(value: Any, spec: str = ".1f") -> str:
    """A table cell: numbers formatted, None as an en dash."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, int | float):
        return format(value, spec)
    return str(value)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table; cells are already strings (see `fmt`)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- BENCHMARKS.md -------------------------------------------------------------------------
def replace_section(document: str, name: str, body: str) -> str:
    """``document`` with benchmark ``name``'s section replaced by ``body`` (appended when the
    section is not there yet). Sections are delimited by HTML comment markers, so the text
    around them, including other benchmarks' sections, is kept byte for byte."""
    start, end = _start_marker(name), _end_marker(name)
    block = f"{start}\n{body.strip()}\n{end}"
    head, found, rest = document.partition(start)
    if found:
        _, closed, tail = rest.partition(end)
        if not closed:
            raise ValueError(f"section {name!r} has a start marker but no end marker")
        return head + block + tail
    if not document.strip():
        document = MD_TITLE
    return document.rstrip("\n") + "\n\n" + block + "\n"


def update_benchmarks_md(name: str, body: str, path: Path = BENCHMARKS_MD) -> Path:
    """Replace benchmark ``name``'s section of `BENCHMARKS.md` with ``body``."""
    text = path.read_text() if path.exists() else ""
    path.write_text(replace_section(text, name, body))
    return path


def section_header(title: str, command: str, info: Mapping[str, Any], quick: bool) -> str:
    """The first lines of a section: title, the exact command, the machine and the date."""
    mode = "quick mode" if quick else "full mode"
    return (f"## {title}\n\nCommand: `{command}` ({mode}).  \n{machine_line(info)}\n")
