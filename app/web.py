"""The read-only web view of the worker's tables (Faust web)."""

from __future__ import annotations

from typing import Any

from faust import web

from app import observability
from app.main import app, settings
from app.streaming import now_ms
from app.tables import decisions, devices, hopping, models, tumbling
from models.registry import device_is_live

blueprint = web.Blueprint("switchyard")


def worker_ready() -> bool:
    """Partitions assigned, tables recovered, no rebalance under way."""
    try:
        recovered = app.tables.recovery.completed.is_set()
        assigned = bool(app.consumer.assignment())
    except Exception:  # noqa: BLE001 - not started yet
        return False
    return recovered and assigned and not app.rebalancing


def devices_view() -> list[dict[str, Any]]:
    """Every known device with its liveness."""
    now = now_ms()
    out = []
    for device in devices.values():
        if not device:
            continue
        live = device_is_live(device, now, settings.device_timeout_s)
        out.append({**device, "live": live,
                    "seen_ms_ago": now - int(device.get("last_seen_ms", now))})
    return sorted(out, key=lambda d: (d.get("device_class", ""), d.get("device_id", "")))


def models_view() -> list[dict[str, Any]]:
    """Per class: samples, running error, version (coefficients stay in the table)."""
    out = []
    for device_class, stored in models.items():
        if not stored:
            continue
        from models.costmodel import CostModel

        model = CostModel.from_dict(stored)
        out.append({"device_class": device_class, "samples": model.samples,
                    "version": model.version, "error": model.error_summary()})
    return sorted(out, key=lambda m: m["device_class"])


def windows_view() -> list[dict[str, Any]]:
    """The latest windows per (class, op kind), tumbling and hopping."""
    from models.sketch import WindowStats

    out = []
    for name, wrapper in (("tumbling", tumbling), ("hopping", hopping)):
        latest: dict[str, tuple[Any, dict[str, Any]]] = {}
        for stored_key, value in wrapper.table.items():
            try:
                key, (start, end) = stored_key
            except (TypeError, ValueError):
                continue
            if value and (key not in latest or latest[key][0][1] < end):
                latest[key] = ((start, end), value)
        for key, ((start, end), value) in sorted(latest.items()):
            device_class, _, kind = key.partition("|")
            out.append({"window": name, "device_class": device_class, "op_kind": kind,
                        "start": start, "end": end,
                        **WindowStats.from_dict(value).summary()})
    return out


def decisions_view(limit: int = 100) -> list[dict[str, Any]]:
    """The most recent decisions, newest first, with the measured time once known."""
    recent = [v for k, v in decisions.items() if v and not k.endswith(":cursor")]
    recent.sort(key=lambda d: d.get("decided_at_ms", 0), reverse=True)
    return recent[:limit]


@blueprint.route("/api/health", name="health")
class Health(web.View):
    """Liveness and readiness of the worker."""

    async def get(self, request: web.Request) -> web.Response:
        ready = worker_ready()
        body: dict[str, Any] = {"status": "ok" if ready else "starting", "ready": ready,
                                "app": app.conf.id, "time_ms": now_ms(),
                                "deadletters": observability.counter_value(
                                    "switchyard_deadletters_total")}
        return self.json(body)


@blueprint.route("/api/devices", name="devices")
class Devices(web.View):
    """Live and dead devices."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"devices": devices_view()})


@blueprint.route("/api/models", name="models")
class Models(web.View):
    """The cost models per device class."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"models": models_view()})


@blueprint.route("/api/windows", name="windows")
class Windows(web.View):
    """The latest metric windows."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"windows": windows_view()})


@blueprint.route("/api/decisions", name="decisions")
class Decisions(web.View):
    """Recent decisions with predicted and measured times."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"decisions": decisions_view()})


@blueprint.route("/metrics", name="metrics")
class Metrics(web.View):
    """Prometheus text exposition."""

    async def get(self, request: web.Request) -> web.Response:
        return self.text(observability.render_prometheus(),
                         content_type="text/plain; version=0.0.4")


app.web.blueprints.add("", blueprint)
