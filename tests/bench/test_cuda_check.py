"""The one-shot CUDA check: clean exit without a GPU; its loop runs on any runtime."""

from __future__ import annotations

import time

import pytest

import bench.cuda_check as cuda_check
from models.ops import parse_op
from runtimes import get_runtime
from tests.runtimes.conftest import cuda_available


@pytest.mark.skipif(cuda_available(), reason="checks the no-GPU path")
def test_exits_cleanly_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert cuda_check.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_shape_sets_respect_the_element_cap() -> None:
    for op in cuda_check.CHECK_OPS + cuda_check.PERF_OPS:
        parse_op(op)  # raises past 2^28 elements


def test_loop_checks_times_and_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        cuda_check,
        "CHECK_OPS",
        [{"kind": "matmul", "m": 4, "k": 8, "n": 4}, {"kind": "softmax", "rows": 2, "dim": 8}],
    )
    monkeypatch.setattr(cuda_check, "PERF_OPS", [{"kind": "layernorm", "rows": 4, "dim": 16}])
    rows: list[dict] = []
    cuda_check.run_runtime(get_runtime("numpy", "cpu", threads=1), 2, time.monotonic() + 60, rows)
    assert [r["set"] for r in rows] == ["check", "check", "perf"]
    assert all(r["ok"] for r in rows if r["set"] == "check")
    assert rows[-1]["ok"] is None and rows[-1]["median_ms"] > 0
    late: list[dict] = []
    cuda_check.run_runtime(get_runtime("numpy", "cpu", threads=1), 2, time.monotonic() - 1, late)
    assert all(r["skipped"] == "time budget" for r in late)
    assert "skipped" in cuda_check.format_row(late[0])
