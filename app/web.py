"""The read-only web view of the worker's tables (Faust web)."""

from __future__ import annotations

from typing import Any

from faust import web

from app.main import app
from app.streaming import now_ms

blueprint = web.Blueprint("switchyard")


def worker_ready() -> bool:
    """Partitions assigned, tables recovered, no rebalance under way."""
    try:
        recovered = app.tables.recovery.completed.is_set()
        assigned = bool(app.consumer.assignment())
    except Exception:  # noqa: BLE001 - not started yet
        return False
    return recovered and assigned and not app.rebalancing


@blueprint.route("/api/health", name="health")
class Health(web.View):
    """Liveness and readiness of the worker."""

    async def get(self, request: web.Request) -> web.Response:
        ready = worker_ready()
        body: dict[str, Any] = {"status": "ok" if ready else "starting", "ready": ready,
                                "app": app.conf.id, "time_ms": now_ms()}
        return self.json(body)


app.web.blueprints.add("", blueprint)
