"""The Faust application: built from a settings object, with the contract's topics and tables.

Importing this module builds nothing. ``build(settings)`` makes the worker's app and topics
(and installs the Faust patches) once per process; the stage modules (agents.*, app.tables,
app.web, ...) bind to that app when they are first imported, so a process builds its app
before it imports them: ``main`` does it from the environment's settings (``python -m app
worker -l info``, the Faust convention; ``switchyard worker``), the test suite from its own
(an in-memory store, tests/conftest.py). A stage imported before any build is a clear error,
not an app quietly built from whatever the environment held at that moment.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from app import faust_patches
from app.settings import Settings, get_settings

logger = logging.getLogger(__name__)


def broker_credentials(settings: Settings) -> Any:
    """Faust credentials for the configured Kafka security protocol (None for PLAINTEXT)."""
    if settings.security_protocol == "PLAINTEXT":
        return None
    if settings.security_protocol == "SSL":
        return faust.SSLCredentials(settings.ssl_context())
    password = settings.sasl_password.get_secret_value() if settings.sasl_password else ""
    return faust.SASLCredentials(
        username=settings.sasl_username or "",
        password=password,
        mechanism=settings.sasl_mechanism,
        ssl_context=settings.ssl_context(),
    )


def create_app(settings: Settings, *, app_id: str | None = None) -> faust.App:
    """Build the Faust app. Tests build their own with another id and data dir."""
    return faust.App(
        app_id or settings.app_id,
        broker=settings.broker_url,
        broker_credentials=broker_credentials(settings),
        store=settings.store,
        datadir=str(settings.data_dir),
        # Stages are imported explicitly (load_stages): autodiscovery swallows import errors
        # and would start a worker with no agents at all.
        autodiscover=False,
        topic_partitions=settings.workload_partitions,
        topic_replication_factor=1,
        # At-least-once plus idempotent effects: Faust's exactly_once is unreliable
        # (faust-streaming issues 517, 323, 440, 177).
        processing_guarantee="at_least_once",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        # A short commit interval bounds the work redone after a crash.
        broker_commit_interval=1.0,
        # A worker killed without leaving the group holds its partitions until its session
        # times out: Faust's 60 s default was most of the recovery time after kill -9
        # (tests/reliability/test_worker_crash.py). Heartbeats come from Faust's consumer
        # thread, so a busy event loop does not expire the session; 15 s leaves room for a
        # loaded 2-core machine.
        broker_session_timeout=15.0,
        broker_heartbeat_interval=3.0,
        # A restarted worker reclaims its partitions without waiting for that session
        # (Settings.static_membership); a clean stop still leaves the group at once
        # (app/faust_patches.py).
        consumer_group_instance_id=settings.worker_instance_id(),
        web_port=settings.web_port,
        web_bind=settings.web_bind,
        web_host=settings.web_bind,
        # The web view is read-only: Faust's raw table and debug pages stay off unless asked for.
        web_tables_enabled=settings.web_debug_routes,
        web_router_enabled=settings.web_debug_routes,
        web_graph_enabled=settings.web_debug_routes,
        web_stats_enabled=settings.web_debug_routes,
        web_metrics_enabled=False,
        # Windowed tables are swept this often; the sweep is what frees expired windows.
        table_cleanup_interval=5.0,
        stream_wait_empty=False,
        producer_max_request_size=16 * 1024 * 1024,
        producer_linger=settings.producer_linger_ms / 1000.0,
        producer_max_batch_size=settings.producer_max_batch_bytes,
        consumer_max_fetch_size=16 * 1024 * 1024,
        # No standby replicas: a partition a worker takes over is recovered from its changelog,
        # not promoted from a standby copy. With Faust's default (one standby), a worker that
        # took a partition over from a leaving one found its stores stale although Faust had
        # them at the changelog's end: its offset guard re-read workloads already completed, and
        # the completed table, as stale, let them complete twice (tests/reliability/
        # test_rebalance.py::test_worker_joins_then_one_leaves_mid_trace, 1 run in 5, 2026-12-07).
        table_standby_replicas=0,
    )


class Topics:
    """The contract's topics as Faust topic objects of one app, declared in one place."""

    def __init__(self, app: faust.App, settings: Settings) -> None:
        # internal=True: the worker creates these topics, with these partition counts, when
        # they do not exist yet (Faust only declares topics it considers its own).
        raw: dict[str, Any] = {"key_type": str, "key_serializer": "raw",
                               "value_serializer": "raw", "internal": True}
        # Inputs are read as raw bytes: the stage validates them itself so that bad input
        # becomes a dead letter with its original bytes rather than a crashed agent.
        names = settings.topic_names
        self.workloads = app.topic(names.workloads, partitions=settings.workload_partitions, **raw)
        self.outcomes = app.topic(names.outcomes, partitions=settings.workload_partitions, **raw)
        self.metrics = app.topic(names.metrics, partitions=settings.metric_partitions, **raw)
        self.heartbeats = app.topic(names.heartbeats, partitions=settings.metric_partitions, **raw)
        # Internal: re-route requests for in-flight work whose device class died.
        self.reroutes = app.topic(names.reroutes, partitions=settings.workload_partitions, **raw)
        self.deadletter = app.topic(names.deadletter, partitions=1, **raw)
        self._routes: dict[str, faust.TopicT] = {}
        self._app = app
        self._settings = settings

    def route(self, device_class: str) -> faust.TopicT:
        """The route topic of ``device_class`` (declared once per class)."""
        topic = self._routes.get(device_class)
        if topic is None:
            topic = self._app.topic(
                self._settings.topic_names.route(device_class),
                partitions=self._settings.route_partitions,
                key_type=str, key_serializer="raw", value_serializer="raw", internal=True,
            )
            self._routes[device_class] = topic
        return topic


@dataclass(frozen=True)
class Worker:
    """One built worker: its settings, Faust app and topics."""

    settings: Settings
    app: faust.App
    topics: Topics


_built: list[Worker] = []


def build(settings: Settings) -> Worker:
    """Build the worker's app and topics from ``settings`` and make them the ones the stages
    bind to. Once per process: a second call with the same settings returns the same worker,
    with other settings it is an error (the stages already bound to the first)."""
    if _built:
        if _built[0].settings == settings:
            return _built[0]
        raise RuntimeError("a Switchyard worker is already built in this process with other "
                           "settings; its stages are bound to it")
    faust_patches.install()
    app = create_app(settings)
    worker = Worker(settings, app, Topics(app, settings))
    _built.append(worker)
    return worker


def built() -> Worker:
    """The worker this process built; RuntimeError when none is yet."""
    if not _built:
        raise RuntimeError("no Switchyard worker is built in this process: call "
                           "app.main.build(settings) before importing its stages (agents.*, "
                           "app.tables, app.web, app.streaming, app.gaps)")
    return _built[0]


# What the stages import (``from app.main import app, settings, topics``): the built worker's,
# looked up when imported (PEP 562), never built here.
settings: Settings
app: faust.App
topics: Topics


def __getattr__(name: str) -> Any:
    if name in ("settings", "app", "topics"):
        return getattr(built(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


STAGES = ("agents.registry", "agents.metrics", "agents.decide",
          "agents.complete", "agents.probe", "app.web")


def load_stages() -> None:
    """Import every stage module, registering its agents, timers, tables and views."""
    import importlib

    for module in STAGES:
        importlib.import_module(module)


def ensure_contract_topics() -> None:
    """Create the contract's topics the worker writes but does not read (dead letters) and
    all others, with their partition counts, before Faust starts."""
    import asyncio
    import sys

    from app.admin import contract_topics, ensure_topics

    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        settings = built().settings
        asyncio.run(ensure_topics(settings, contract_topics(settings)))


def discard_state_after_crash() -> Path:
    """Rebuild every table from its changelog when the last worker on this data dir crashed;
    return the marker file that a clean stop removes.

    A table write lands in the local RocksDB store at once and in its changelog later, so a
    worker killed in between leaves local state its changelog never saw. For ``completed``
    that is a result missing from switchyard.results: trusted after a restart, it made the
    redelivered outcome look like a duplicate and the result was never published
    (tests/reliability/test_worker_crash.py). Like Kafka Streams without a clean-shutdown
    checkpoint, the local stores are dropped and restored from the changelogs.
    """
    import shutil

    app = built().app
    marker = Path(app.conf.datadir) / ".worker-running"
    tables = Path(app.conf.tabledir)
    if marker.exists() and tables.exists():
        logger.warning("the last worker on %s did not stop cleanly: restoring every table "
                       "from its changelog", app.conf.datadir)
        shutil.rmtree(tables)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("a worker runs on this data dir; removed when it stops cleanly\n")
    return marker


def main(settings: Settings | None = None) -> None:
    """Entry point of ``python -m app``: Faust's own command line, for the worker built from
    ``settings`` (the environment's where None)."""
    import sys

    worker = build(settings if settings is not None else get_settings())
    app = worker.app
    load_stages()
    ensure_contract_topics()
    if not (len(sys.argv) > 1 and sys.argv[1] == "worker"):
        app.main()
        return
    from app.loop import limit_blas_threads, tune_gc

    marker = discard_state_after_crash()
    limit_blas_threads()
    tune_gc(worker.settings.gc_gen0_threshold)
    try:
        app.main()
    except SystemExit as exc:
        if exc.code in (None, 0):
            marker.unlink(missing_ok=True)
        raise
    marker.unlink(missing_ok=True)
