"""The web view against a real worker with live executors: the JSON API, /metrics, and the
dashboard in headless Chromium (Debian's ``chromium`` driven by Playwright; never a browser
that Playwright downloads). In CI a missing chromium fails the test instead of skipping it.

One cluster for the whole module: a worker takes 10-30 s to start on a small machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.local import LocalCluster
from models.traces import synthetic_trace
from tests.conftest import IN_CI

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "bench" / "out" / "dashboard.png"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
LOAD = 60


def submit_trace(cluster: LocalCluster, workdir: Path, count: int, seed: int) -> dict[str, Any]:
    """Send a synthetic trace with the real CLI (``switchyard submit --wait``); its summary."""
    trace = workdir / f"trace-{seed}.jsonl"
    trace.write_text("".join(json.dumps(w) + "\n" for w in
                             synthetic_trace(count, seed=seed, id_prefix=f"s{seed}-")))
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "submit", "--trace", str(trace), "--rate", "30",
         "--wait", "--timeout", "120"],
        env=cluster.base_env(), capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"stdout": done.stdout, "stderr": done.stderr}


def settle(cluster: LocalCluster, count: int, timeout_s: float = 60.0) -> None:
    """Wait until the metric path (windows, models) caught up with ``count`` results: metrics
    travel on their own topic, so a result can be visible before its metric is folded in."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dash = cluster.api("/api/dashboard")
        executed = sum(r["count"] for rows in dash["window_series"].values() for r in rows)
        learned = sum(m.get("samples", 0) for m in cluster.api("/api/models")["models"])
        if executed >= count and learned >= count and dash["totals"]["results"].get("ok") == count:
            return
        time.sleep(0.5)
    raise AssertionError(f"the worker did not process {count} workloads in {timeout_s:.0f} s")


@pytest.fixture(scope="module")
def cluster(broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    workdir = tmp_path_factory.mktemp("dashboard")
    # Without dynamic batching: the checks below count one learned sample per workload, and a
    # batched call is learned once (agents/learn.py), so batches would make the count vary.
    local = LocalCluster.isolated(workdir, broker=broker, SWITCHYARD_EXECUTOR_BATCHING="false")
    try:
        worker = local.start_worker()
        executors = [local.start_executor("numpy"), local.start_executor("sim", "h100"),
                     local.start_executor("sim", "l4")]
        local.wait_ready(worker, timeout_s=180)
        local.wait_devices([p.name for p in executors], timeout_s=120)
        submit_trace(local, workdir, LOAD, seed=1)
        settle(local, LOAD)
        yield local
    finally:
        local.stop()


def get_text(cluster: LocalCluster, path: str) -> tuple[str, str]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.web_port}{path}", timeout=5) as r:
        return r.headers.get("Content-Type", ""), r.read().decode()


def test_health_and_devices(cluster: LocalCluster) -> None:
    health = cluster.api("/api/health")
    assert health["ready"] is True and health["status"] == "ok"
    assert health["assigned_partitions"] > 0
    inputs = health["consumer"]["inputs"]  # where each workload/outcome partition stands
    assert inputs and all(set(v) == {"position", "read", "committed", "acked_min", "acked"}
                          for v in inputs.values()), inputs
    assert any(name.endswith("switchyard.workloads[0]") for name in inputs), sorted(inputs)
    devices = cluster.api("/api/devices")["devices"]
    assert {d["device_class"] for d in devices} == {"numpy-cpu-x86", "sim-h100", "sim-l4"}
    for d in devices:
        assert d["live"] is True and d["health"] in ("ok", "late")
        for key in ("device_id", "runtime", "queue_depth", "power_w", "seen_ms_ago"):
            assert key in d


def test_models_windows_and_decisions(cluster: LocalCluster) -> None:
    models = {m["device_class"]: m for m in cluster.api("/api/models")["models"]}
    assert sum(m["samples"] for m in models.values()) == LOAD
    for model in models.values():
        assert model["version"] >= 1
        assert {"coefficients", "uncertainty", "error", "largest_shifts"} <= set(model)
    windows = cluster.api("/api/windows")["windows"]
    assert {w["window"] for w in windows} == {"tumbling", "hopping"}
    for kind in ("tumbling", "hopping"):
        # Only the newest window of each key is listed, so it holds part of the load.
        assert 0 < sum(w["count"] for w in windows if w["window"] == kind) <= LOAD
    for w in windows:
        assert w["p50_ms"] <= w["p95_ms"] <= w["p99_ms"] and w["start"] < w["end"]
    decisions = cluster.api("/api/decisions?limit=500")["decisions"]
    assert len(decisions) == LOAD
    measured = [d for d in decisions if d["measured_ms"] is not None]
    assert len(measured) >= LOAD * 0.9  # all of them: test_nothing_is_left_in_flight
    for d in measured:
        assert d["status"] == "ok" and d["measured_ms"] > 0 and d["predicted_ms"] > 0
    local = cluster.api("/api/decisions?scope=local&limit=5")
    assert len(local["decisions"]) == 5 and local["unreachable"] == []


def test_dashboard_document(cluster: LocalCluster) -> None:
    dash = cluster.api("/api/dashboard")
    assert set(dash["window_series"]) <= {"numpy-cpu-x86", "sim-h100", "sim-l4"}
    executed = sum(r["count"] for rows in dash["window_series"].values() for r in rows)
    assert executed == LOAD
    series = dash["decision_series"]
    assert sum(sum(v) for v in series["count"].values()) == LOAD
    assert dash["totals"]["results"].get("ok") == LOAD


def test_prometheus_metrics(cluster: LocalCluster) -> None:
    content_type, text = get_text(cluster, "/metrics")
    assert content_type.startswith("text/plain")
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    assert sum(s.value for s in samples["switchyard_decisions_total"]) == LOAD
    assert sum(s.value for s in samples["switchyard_results_total"]
               if s.labels["status"] == "ok") == LOAD
    live = {s.labels["device_class"]: s.value for s in samples["switchyard_live_devices"]}
    assert live == {"numpy-cpu-x86": 1, "sim-h100": 1, "sim-l4": 1}
    assert {s.labels["device_class"] for s in samples["switchyard_model_error_ratio"]}
    backlog = {s.labels["device_class"]: s.value for s in samples["switchyard_backlog_seconds"]}
    # Every class the load was routed to has a backlog gauge (which classes those are is the
    # router's choice: NumPy got none of the 60 in one CI run).
    routed = {d["device_class"] for d in cluster.api("/api/decisions?limit=500")["decisions"]}
    assert routed and routed <= set(backlog) <= set(live), (routed, backlog)
    assert all(v >= 0 for v in backlog.values())
    assert samples["switchyard_worker_ready"][0].value == 1


def test_nothing_is_left_in_flight(cluster: LocalCluster) -> None:
    dash = cluster.api("/api/dashboard")
    assert dash["inflight"] == 0, dash["inflight_oldest"]
    # Nothing in flight, so no backlog (up to the float residue of adding and subtracting).
    assert all(abs(v["ms"]) < 1e-6 for v in dash["backlog"].values()), dash["backlog"]
    decisions = cluster.api("/api/decisions?limit=500")["decisions"]
    assert all(d["measured_ms"] is not None for d in decisions)


def test_index_and_static_files(cluster: LocalCluster) -> None:
    content_type, html = get_text(cluster, "/")
    assert content_type.startswith("text/html") and "<title>Switchyard</title>" in html
    content_type, script = get_text(cluster, "/static/uPlot.iife.min.js")
    assert "uPlot" in script[:300]


def chromium_path() -> str:
    """The system chromium; fails in CI (it must be installed there), skips elsewhere."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        path = None
    if path is None:
        message = ("no chromium or no playwright: apt-get install -y chromium; "
                   "pip install playwright (never `playwright install`)")
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def test_dashboard_in_a_browser(cluster: LocalCluster) -> None:
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    submit_trace(cluster, cluster.workdir, 30, seed=2)  # a second burst: the charts move
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.goto(f"http://127.0.0.1:{cluster.web_port}/", wait_until="load")
            # Two refreshes: the second one updates charts that exist (setData path).
            page.wait_for_function("Number(document.body.dataset.updates) >= 2", timeout=30_000)
            rows = page.locator("#devices tbody tr")
            assert rows.count() == 3
            table = page.locator("#devices").inner_text()
            for proc in cluster.procs[1:]:
                assert proc.name in table
            assert page.locator("#status").inner_text() == "worker ready"
            for chart in ("share", "throughput", "error", "latency", "percentiles"):
                canvas = page.locator(f"#chart-{chart} canvas")
                assert canvas.count() == 1, f"chart {chart} did not render"
                box = canvas.bounding_box()
                assert box and box["width"] > 200 and box["height"] > 100
            assert page.locator("#banner").is_hidden()
            assert int(page.locator("#t-deadletters").inner_text()) == 0
            # A row per class that has learned: which classes ran the load is the router's
            # choice (NumPy ran none of it in one CI run once torch's and NumPy's calibrated
            # rates read their steady rates), so the rows are counted against /api/models.
            learned = len(cluster.api("/api/models")["models"])
            assert learned >= 1 and page.locator("#models tbody tr").count() == learned
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert SCREENSHOT.stat().st_size > 20_000


def test_a_killed_device_shows_dead(cluster: LocalCluster) -> None:
    victim = next(p for p in cluster.procs if p.name.startswith("sim-l4"))
    cluster.kill(victim)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        devices = {d["device_id"]: d for d in cluster.api("/api/devices")["devices"]}
        if devices[victim.name]["health"] == "dead":
            break
        time.sleep(0.5)
    assert devices[victim.name]["live"] is False and devices[victim.name]["health"] == "dead"
    _, text = get_text(cluster, "/metrics")
    assert 'switchyard_live_devices{device_class="sim-l4"} 0' in text
    assert 'switchyard_devices{device_class="sim-l4",health="dead"} 1' in text
