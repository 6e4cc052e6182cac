"""The pure parts of bench.common: section updater, statistics, JSON output."""

from __future__ import annotations

import json
import math

import pytest

from bench.common import (
    attainment,
    markdown_table,
    ratio,
    replace_section,
    summarize,
    update_benchmarks_md,
    write_json,
)


def test_replace_section_appends_to_an_empty_document_with_a_title() -> None:
    doc = replace_section("", "pipeline", "## Pipeline\nbody")
    assert doc.startswith("# Switchyard benchmarks")
    assert "<!-- bench:pipeline:start -->\n## Pipeline\nbody\n<!-- bench:pipeline:end -->" in doc


def test_replace_section_replaces_only_its_own_section() -> None:
    doc = replace_section(replace_section("# T\n\nintro\n", "a", "A1"), "b", "B1")
    updated = replace_section(doc, "a", "A2")
    assert "A2" in updated and "A1" not in updated and "B1" in updated
    assert updated.startswith("# T\n\nintro\n")
    assert updated.index("A2") < updated.index("B1")  # order kept
    assert replace_section(updated, "a", "A2") == updated  # idempotent


def test_replace_section_refuses_an_unclosed_section() -> None:
    with pytest.raises(ValueError):
        replace_section("<!-- bench:a:start -->\nno end", "a", "x")


def test_update_benchmarks_md_writes_the_file(tmp_path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    update_benchmarks_md("drift", "D1", path)
    update_benchmarks_md("costmodel", "C1", path)
    update_benchmarks_md("drift", "D2", path)
    text = path.read_text()
    assert "D2" in text and "D1" not in text and "C1" in text


def test_summarize_percentiles_and_empty() -> None:
    stats = summarize(range(1, 101))
    assert stats["n"] == 100 and stats["mean"] == pytest.approx(50.5)
    assert stats["p50"] == pytest.approx(50.5) and stats["p99"] == pytest.approx(99.01)
    assert summarize([])["mean"] is None


def test_attainment_ignores_workloads_without_deadline() -> None:
    assert attainment([10, 20, 30], [15, None, 25]) == pytest.approx(0.5)
    assert attainment([1.0], [None]) is None


def test_ratio_handles_missing_values() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(1.0, 0.0) is None


def test_write_json_turns_nan_into_null(tmp_path) -> None:
    path = write_json(tmp_path, "x", {"a": math.nan, "b": [math.inf, 1.0]})
    assert json.loads(path.read_text()) == {"a": None, "b": [None, 1.0]}


def test_markdown_table_shape() -> None:
    table = markdown_table(["a", "b"], [["1", "2"]]).splitlines()
    assert table == ["| a | b |", "|---|---|", "| 1 | 2 |"]
