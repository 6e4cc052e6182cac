"""RELIABILITY.md is rendered from the scenarios' figures, never typed in (bench/reliability.py)."""

from __future__ import annotations

from bench.reliability import render

FIGURES = {
    "worker_crash/bounded": {
        "scenario": "worker_crash", "scale": "bounded", "workloads_sent": 240, "results": 240,
        "duplicate_results": 0, "duplicates_suppressed": 9, "lost": 0,
        "kill_to_next_result_s": 15.9, "kill_to_ready_s": 16.1,
        "models_before": {"sim-h100": 30}, "models_after_restart": {"sim-h100": 31}},
    "hostile_input/bounded": {
        "scenario": "hostile_input", "scale": "bounded", "hostile_sent": 1200,
        "dead_lettered": 1200, "by_topic": {"workloads": 450}, "categories": 88,
        "valid_sent": 120, "valid_completed": 120, "worker_rss_growth_mib": 21.3},
    "soak/bounded": {
        "scenario": "soak", "scale": "bounded", "seconds": 40.0, "offered_per_s": 15.0,
        "throughput_per_s_median": 15.0, "throughput_per_s_min": 14.8, "throughput_held": 1.0,
        "decision_latency_ms": {"p50": 11.0, "p99": 67.2},
        "worker_rss": {"first_mib": 121.0, "peak_mib": 128.2, "last_mib": 128.2,
                       "slope_second_half_mib_per_min": 5.56},
        "table_live_keys": {"inflight": {"start": 0, "mid": 3, "end": 0, "max": 5}}},
}


def test_page_has_every_figure_the_issue_asks_for():
    page = render(FIGURES, [("test_worker_crash::x[bounded]", "passed", 46.0)], "bounded")
    assert "| worker_crash | bounded | 240 | 240 | 0 | 9 | **0** | 15.9" in page
    assert "| bounded | 1200 | 1200 |" in page  # hostile inputs tried, all dead-lettered
    assert "121.0 → 128.2 → 128.2 | 5.56 |" in page  # memory trend
    assert "inflight 0→3→0 (max 5)" in page
    assert "| `test_worker_crash::x[bounded]` | passed | 46 |" in page


def _junit(path, cases: dict[str, str]) -> None:
    body = "".join(
        f'<testcase classname="tests.reliability.test_x" name="{name}" time="1.0">'
        + ('<failure message="boom"/>' if outcome == "failed" else "") + "</testcase>"
        for name, outcome in cases.items())
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{body}'
                    "</testsuite></testsuites>")


def test_a_rerun_of_one_scenario_replaces_only_its_verdict(tmp_path):
    import xml.etree.ElementTree as ET

    from bench.reliability import merge_verdicts

    kept, fresh = tmp_path / "kept.xml", tmp_path / "fresh.xml"
    _junit(kept, {"test_a[long]": "passed", "test_b[long]": "failed"})
    _junit(fresh, {"test_b[long]": "passed"})
    merge_verdicts(kept, fresh)
    cases = {c.get("name"): [x.tag for x in c] for c in ET.parse(kept).getroot().iter("testcase")}
    assert cases == {"test_a[long]": [], "test_b[long]": []} and not fresh.exists()
