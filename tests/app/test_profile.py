"""`switchyard profile`: a trace's ops timed per variant on one runtime, without Kafka."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.profile import load_trace_ops, run_profile


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    lines = [
        {"id": "a", "op": {"kind": "matmul", "m": 8, "k": 8, "n": 8}},
        {"id": "b", "op": {"kind": "matmul", "m": 8, "k": 8, "n": 8}},  # same op: profiled once
        {
            "id": "c",
            "op": {"kind": "softmax", "rows": 4, "dim": 16},
            "precisions": ["fp32", "bf16"],
        },
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n\n")
    return path


def test_trace_ops_are_distinct_and_bad_lines_reported(trace: Path) -> None:
    ops, problems = load_trace_ops(trace)
    assert [op.kind for op in ops] == ["matmul", "softmax"]
    assert len(problems) == 1 and problems[0].startswith("line 4")


def test_profile_prints_a_row_per_op_and_variant(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cores = os.sched_getaffinity(0)
    assert run_profile("numpy", "cpu", trace, threads=1, repeats=3) == 0
    # Pinned to one core while it profiled, and the calling process got its cores back (the
    # pin once leaked into the test run: every later test ran on one core).
    assert os.sched_getaffinity(0) == cores
    out = capsys.readouterr()
    assert "pinned to cpu(s)" in out.out
    rows = [line for line in out.out.splitlines() if line.startswith(("matmul:", "softmax:"))]
    assert len(rows) == 2 and all("fp32/eager" in r for r in rows)
    assert "skipped line 4" in out.err


def test_profile_names_simulated_devices(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_profile("sim", "l4", trace, threads=None, repeats=2) == 0
    out = capsys.readouterr().out
    assert "sim-l4 (SIMULATED)" in out and "bf16/eager" in out


def test_profile_errors_are_exit_codes(tmp_path: Path, trace: Path) -> None:
    assert run_profile("numpy", "cpu", tmp_path / "missing.jsonl", threads=1, repeats=1) == 2
    assert run_profile("numpy", "cuda:0", trace, threads=1, repeats=1) == 2
