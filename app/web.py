"""The read-only web view of the worker's tables (Faust web): JSON API, /metrics, dashboard.

| route | answers from | partitioned? |
|---|---|---|
| ``/`` | the dashboard (``app/static/index.html``), which polls the routes below | |
| ``/api/health`` | this worker's consumer and recovery state | |
| ``/api/devices`` | ``devices`` (global table: every worker has every row) | no |
| ``/api/models`` | ``models`` (global) | no |
| ``/api/windows`` | ``window_tumbling``, ``window_hopping`` | by device class |
| ``/api/decisions`` | recent decisions (in memory, agents/state.py) | by workload id |
| ``/api/dashboard`` | all of the above, shaped for the charts | |
| ``/metrics`` | process counters plus gauges read from the tables at scrape time | |

A partitioned table holds only this worker's partitions. Answers are *scattered and gathered*:
the worker asks every other worker that owns partitions of the table (Faust's assignor knows
them and their web URLs) for its part (``?scope=local``) and merges. Faust's
``app.table_route`` is not used: it forwards a request for *one key* to its owner, and these
views are aggregates over all keys. With one worker no request leaves the process.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from faust import web

from agents import state
from agents.state import worker_ready
from app import observability, webviews
from app.main import app, settings, topics
from app.streaming import now_ms
from app.tables import completed, devices, hopping, inflight, models, tumbling

logger = logging.getLogger(__name__)
blueprint = web.Blueprint("switchyard")
STATIC_DIR = Path(__file__).parent / "static"
# Peers answer within this or are reported as unreachable: a slow peer must not hang the view.
PEER_TIMEOUT_S = 2.0
DECISION_LIMIT = 100
DASHBOARD_BUCKET_MS = 5_000


def consumer_flow() -> dict[str, Any]:
    """Where this worker's consumer stands: flow on or suspended, and which assigned partitions
    it is not fetching (paused by Faust or aiokafka, or set aside while a stream's buffer is
    full). A worker that holds partitions it does not fetch is stalled; this says why."""
    try:
        consumer: Any = app.consumer
        assigned = set(consumer.assignment())
        active = set(consumer._get_active_partitions())
        paused = set(consumer._paused_partitions)
        buffered = set(consumer._buffered_partitions)
        driver = consumer._thread._consumer  # aiokafka's AIOKafkaConsumer
        driver_paused = set(driver.paused()) if driver is not None else set()
    except Exception:  # noqa: BLE001 - not started yet
        return {}

    def names(tps: set[Any]) -> list[str]:
        return sorted(f"{tp.topic}[{tp.partition}]" for tp in tps)[:50]

    return {
        "flow_active": bool(consumer.flow_active), "rebalancing": bool(app.rebalancing),
        "assigned": len(assigned), "active": len(active & assigned),
        "not_fetched": names(assigned - active),
        "paused": names(paused), "buffered": names(buffered), "driver_paused": names(driver_paused),
        "inputs": input_positions(consumer, driver, assigned),
    }


def input_positions(consumer: Any, driver: Any, assigned: set[Any]) -> dict[str, Any]:
    """Per assigned workload/outcome partition: where the driver fetches next, the last offset
    Faust handed to a stream, the offset Faust last committed, and the acknowledged offsets it
    holds back (the lowest of them and how many): a partition whose commit does not move
    while work is done says here why."""
    inputs = {topics.workloads.get_topic_name(), topics.outcomes.get_topic_name()}
    out: dict[str, Any] = {}
    for tp in sorted(t for t in assigned if t.topic in inputs):
        try:
            state = driver._subscription.subscription.assignment.state_value(tp)
            position = state.position if state is not None and state.has_valid_position else None
        except Exception:  # noqa: BLE001 - between assignments
            position = None
        acked = list(consumer._acked.get(tp, ()))
        out[f"{tp.topic}[{tp.partition}]"] = {
            "position": position, "read": consumer._read_offset.get(tp),
            "committed": consumer._committed_offset.get(tp),
            "acked_min": min(acked) if acked else None, "acked": len(acked),
        }
    return out


# --- reading the tables -------------------------------------------------------------------
def devices_view() -> list[dict[str, Any]]:
    """Every known device, live and dead, with its health."""
    return webviews.device_rows(devices.values(), now_ms(), settings.heartbeat_interval_s,
                                settings.device_timeout_s)


def models_view() -> list[dict[str, Any]]:
    """Per class: samples, running error, coefficient summary, version."""
    out = []
    for device_class, stored in models.items():
        if not stored:
            continue
        try:
            out.append(webviews.model_summary(device_class, stored))
        except (KeyError, TypeError, ValueError) as exc:  # one bad entry must not hide the rest
            out.append({"device_class": device_class, "invalid": str(exc)})
    return sorted(out, key=lambda m: m["device_class"])


def windows_view() -> list[dict[str, Any]]:
    """The latest windows per (class, op kind), tumbling and hopping, of this worker."""
    return (webviews.latest_windows("tumbling", tumbling.table.items())
            + webviews.latest_windows("hopping", hopping.table.items()))


def decisions_view(limit: int = DECISION_LIMIT) -> list[dict[str, Any]]:
    """This worker's most recent decisions, newest first, with the measured time once known.

    The measured side is joined here, from the results (the completed table), rather than
    written back into the ring at completion: one table write less per workload.
    """
    recent = webviews.recent_decisions(state.recent_decisions(), limit)
    for decision in recent:
        if decision.get("measured_ms") is None and decision.get("id"):
            stored = completed.get(str(decision["id"]).encode())
            if stored is not None:  # a ResultRecord's JSON (app/tables.py)
                result = orjson.loads(stored)
                decision.update(measured_ms=result["latency_ms"], queue_ms=result["queue_ms"],
                                status=result["status"], device_id=result["device_id"])
    return recent


# --- scatter and gather over the workers --------------------------------------------------
def peer_urls(table_name: str) -> list[str]:
    """Web URLs of the other workers owning partitions of ``table_name`` (none with one)."""
    try:
        hosts = app.router.table_metadata(table_name)
    except Exception:  # noqa: BLE001 - no assignment yet (starting, rebalancing)
        return []
    own = str(app.conf.canonical_url).rstrip("/")
    return sorted(str(url).rstrip("/") for url, partitions in hosts.items()
                  if partitions and str(url).rstrip("/") != own)


async def _fetch(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        response.raise_for_status()
        return await response.json()


async def gather(table_name: str, path: str, field: str, local: list[Any],
                 ) -> tuple[list[Any], list[str]]:
    """``local`` plus the ``field`` lists the peers owning ``table_name`` answer at ``path``;
    also the peers that did not answer (their part is missing, and the answer says so)."""
    peers = peer_urls(table_name)
    if not peers:
        return local, []
    timeout = aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)
    sep = "&" if "?" in path else "?"
    async with aiohttp.ClientSession(timeout=timeout) as session:
        answers = await asyncio.gather(
            *(_fetch(session, f"{peer}{path}{sep}scope=local") for peer in peers),
            return_exceptions=True)
    rows, unreachable = list(local), []
    for peer, answer in zip(peers, answers, strict=True):
        if isinstance(answer, BaseException) or not isinstance(answer, dict):
            logger.warning("web view: peer %s did not answer %s: %s", peer, path, answer)
            unreachable.append(peer)
        else:
            rows.extend(answer.get(field) or [])
    return rows, unreachable


def _local_only(request: web.Request) -> bool:
    return request.query.get("scope") == "local"


def _limit(request: web.Request, default: int = DECISION_LIMIT) -> int:
    try:
        return max(1, min(5000, int(request.query.get("limit", default))))
    except ValueError:
        return default


# --- /metrics gauges read from the tables -------------------------------------------------
def refresh_table_gauges() -> None:
    """Set the gauges that describe table state, just before a scrape."""
    observability.set_gauge("switchyard_worker_ready", 1.0 if worker_ready() else 0.0)
    rows = devices_view()
    live: dict[observability.Labels, float] = {}
    known: dict[observability.Labels, float] = {}
    for row in rows:
        device_class = str(row.get("device_class"))
        live.setdefault((("device_class", device_class),), 0.0)
        live[(("device_class", device_class),)] += 1.0 if row["live"] else 0.0
        key = (("device_class", device_class), ("health", row["health"]))
        known[key] = known.get(key, 0.0) + 1.0
    observability.replace_gauge("switchyard_live_devices", live)
    observability.replace_gauge("switchyard_devices", known)
    errors: dict[observability.Labels, float] = {}
    samples: dict[observability.Labels, float] = {}
    for summary in models_view():
        label = (("device_class", summary["device_class"]),)
        if summary.get("error_ratio") is not None:
            errors[label] = summary["error_ratio"]
        if "samples" in summary:
            samples[label] = float(summary["samples"])
    observability.replace_gauge("switchyard_model_error_ratio", errors)
    observability.replace_gauge("switchyard_model_samples", samples)
    queued = state.backlog.by_class()
    seconds: dict[observability.Labels, float] = {}
    counts: dict[observability.Labels, float] = {}
    for device_class, held in queued.items():
        seconds[(("device_class", device_class),)] = held["ms"] / 1000.0
        counts[(("device_class", device_class),)] = float(held["count"])
    observability.replace_gauge("switchyard_backlog_seconds", seconds)
    observability.replace_gauge("switchyard_inflight_workloads", counts)


# --- routes -----------------------------------------------------------------------------------
@blueprint.route("/api/health", name="health")
class Health(web.View):
    """Liveness and readiness of the worker (``ready``: partitions assigned, tables recovered)."""

    async def get(self, request: web.Request) -> web.Response:
        ready = worker_ready()
        try:
            assigned = len(app.consumer.assignment())
        except Exception:  # noqa: BLE001 - not started yet
            assigned = 0
        return self.json({
            "status": "ok" if ready else "starting", "ready": ready, "app": app.conf.id,
            "time_ms": now_ms(), "assigned_partitions": assigned, "consumer": consumer_flow(),
            "deadletters": observability.counter_value("switchyard_deadletters_total"),
        })


@blueprint.route("/api/backlog", name="backlog")
class BacklogView(web.View):
    """Routed, unfinished work per class as this worker waits on it: its own partitions'
    share (``ms``, ``count``), the other workers' published shares (``others_ms``,
    ``others_count``) and the class's pace (measured ÷ predicted); and each class's learned
    handling around the execution (``handling``: ``a_ms`` + ``ms_per_mb`` per MB moved,
    from ``rows`` outcomes; models/handling.py)."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"worker": state.WORKER_ID, "time_ms": now_ms(),
                          "backlog": state.backlog.by_class(),
                          "handling": state.handling.by_class()})


@blueprint.route("/api/devices", name="devices")
class Devices(web.View):
    """Live and dead devices: class, runtime, health, queue depth, power."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"devices": devices_view()})


@blueprint.route("/api/models", name="models")
class Models(web.View):
    """The cost model of each device class, summarised."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"models": models_view()})


@blueprint.route("/api/windows", name="windows")
class Windows(web.View):
    """The latest metric windows per (class, op kind), from every worker."""

    async def get(self, request: web.Request) -> web.Response:
        rows, unreachable = windows_view(), list[str]()
        if not _local_only(request):
            rows, unreachable = await gather(tumbling.table.name, "/api/windows", "windows",
                                             rows)
        return self.json({"windows": rows, "unreachable": unreachable})


@blueprint.route("/api/decisions", name="decisions")
class Decisions(web.View):
    """Recent decisions (newest first) with predicted and measured times, from every worker."""

    async def get(self, request: web.Request) -> web.Response:
        limit = _limit(request)
        rows, unreachable = decisions_view(limit), list[str]()
        if not _local_only(request):
            rows, unreachable = await gather(inflight.name, f"/api/decisions?limit={limit}",
                                             "decisions", rows)
            rows = webviews.recent_decisions(rows, limit)
        return self.json({"decisions": rows, "unreachable": unreachable})


@blueprint.route("/api/dashboard", name="dashboard_data")
class DashboardData(web.View):
    """What the dashboard's charts plot, in one document."""

    async def get(self, request: web.Request) -> web.Response:
        window_s = settings.tumbling_window_s
        series = webviews.class_window_series(tumbling.table.items(), window_s)
        recent = decisions_view(5000)
        if _local_only(request):  # this worker's part, for the worker gathering the parts
            return self.json({"parts": [{"window_series": series, "decisions": recent}]})
        parts, unreachable = await gather(inflight.name, "/api/dashboard", "parts",
                                          [{"window_series": series, "decisions": recent}])
        merged_series: dict[str, Any] = {}
        merged_decisions: list[dict[str, Any]] = []
        for part in parts:
            merged_series.update(part.get("window_series") or {})
            merged_decisions.extend(part.get("decisions") or [])
        queued = state.backlog.by_class()
        # The oldest unfinished work first: what an operator looks at when something is stuck.
        unfinished = sorted(({"id": k, "device_class": v.get("device_class"),
                              "decided_at_ms": v.get("decided_at_ms"),
                              "attempt": v.get("attempt")} for k, v in state.book.items()),
                            key=lambda e: e["decided_at_ms"] or 0)
        return self.json({
            "time_ms": now_ms(), "ready": worker_ready(), "window_s": window_s,
            "bucket_s": DASHBOARD_BUCKET_MS / 1000.0,
            "window_series": merged_series,
            "decision_series": webviews.decision_series(merged_decisions, DASHBOARD_BUCKET_MS),
            "model_error": webviews.decision_error_by_class(merged_decisions),
            "backlog": queued, "inflight": len(unfinished), "inflight_oldest": unfinished[:10],
            "totals": {
                "decisions": observability.counter_value("switchyard_decisions_total"),
                "results": observability.counter_by("switchyard_results_total", "status"),
                "deadletters": observability.counter_value("switchyard_deadletters_total"),
                "duplicates": observability.counter_value(
                    "switchyard_duplicates_suppressed_total"),
                "reroutes": observability.counter_value("switchyard_reroutes_total"),
            },
            "unreachable": unreachable,
        })


@blueprint.route("/metrics", name="metrics")
class Metrics(web.View):
    """Prometheus text exposition (format 0.0.4)."""

    async def get(self, request: web.Request) -> web.Response:
        refresh_table_gauges()
        return self.text(observability.render_prometheus(),
                         content_type="text/plain; version=0.0.4")


@blueprint.route("/", name="index")
class Index(web.View):
    """The dashboard page; its script and chart library are under /static/."""

    async def get(self, request: web.Request) -> web.Response:
        return self.html((STATIC_DIR / "index.html").read_text(encoding="utf-8"))


def _drop_faust_index() -> None:
    """Faust mounts a ``{"status": "OK"}`` page at ``/`` (its production index) before any
    blueprint of ours, and the first route wins: take it out so ``/`` is the dashboard.
    BlueprintManager has no public way to remove one; the test of ``/`` catches a change."""
    enabled = getattr(app.web.blueprints, "_enabled", None)
    if isinstance(enabled, list):
        enabled[:] = [(prefix, bp) for prefix, bp in enabled
                      if bp != "faust.web.apps.production_index:blueprint"]


blueprint.static("/static/", STATIC_DIR, name="static")
_drop_faust_index()
app.web.blueprints.add("", blueprint)
