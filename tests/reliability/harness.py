"""The reliability suite's harness: a cluster of real processes, a load that survives faults, a
watcher that reads topics in the background, a memory sampler, and the exactly-once ledger.

Everything here observes the system from outside, as a downstream consumer would: results are
counted on ``switchyard.results``, dead letters on ``switchyard.deadletter``, memory from the
worker's process. Waits are on conditions, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from app.local import LocalCluster, Proc
from models.traces import synthetic_trace
from tests.reliability.watch import Load, TopicWatcher, per_outcome

FIGURES_ENV = "SWITCHYARD_RELIABILITY_FIGURES"
# Three missed 1 s heartbeats: short enough for a bounded test, long enough not to flap on a
# loaded 2-core machine.
DEVICE_TIMEOUT_S = "3"


@dataclass(frozen=True)
class Scale:
    """How big one form of a scenario is: CI's bounded form or the long mode's."""

    name: str
    workloads: int
    rate: float
    hostile: int
    soak_s: float
    soak_rate: float


BOUNDED = Scale("bounded", workloads=240, rate=30.0, hostile=1200, soak_s=40.0, soak_rate=15.0)
LONG = Scale("long", workloads=3000, rate=60.0, hostile=10000, soak_s=1800.0, soak_rate=40.0)
# Both forms of a scenario, for ``parametrize("scale", SCALES)``: the bounded one runs in CI,
# the long one (marked slow) only in the long mode.
SCALES = [pytest.param(BOUNDED, id="bounded"),
          pytest.param(LONG, id="long", marks=pytest.mark.slow)]


def topic_names(namespace: str) -> dict[str, str]:
    """The contract topics of one namespace."""
    base = ("workloads", "results", "outcomes", "metrics", "heartbeats", "deadletter", "reroutes")
    return {name: f"{namespace}switchyard.{name}" for name in base}


def route_topic(namespace: str, device_class: str) -> str:
    """A device class's route topic in one namespace."""
    return f"{namespace}switchyard.routes.{device_class}"


# --- the cluster ---------------------------------------------------------------------------
# A secret the shared cluster is configured with (PLAINTEXT still, so it is never used): the
# security tests check that it shows up in no log and no web answer.
CANARY_SECRET = "canary-sekrit-7f3a91"


@dataclass
class Shared:
    """The session's long-lived cluster for the scenarios that do not break it."""

    cluster: LocalCluster
    worker: Proc
    executors: list[Proc]
    workdir: Path


def new_cluster(workdir: Path, broker: str, **env: str) -> LocalCluster:
    """An isolated cluster (own namespace and app id) with a short device timeout."""
    settings = {"SWITCHYARD_DEVICE_TIMEOUT_S": DEVICE_TIMEOUT_S, "SWITCHYARD_LOG_LEVEL": "info",
                **env}
    return LocalCluster.isolated(workdir, broker=broker, **settings)


def start_executors(cluster: LocalCluster, models: Iterable[str], **env: str) -> list[Proc]:
    """One sim executor per catalog model (``h100`` → class ``sim-h100``)."""
    return [cluster.start_executor("sim", model, device_id=f"sim-{model}-{i}", **env)
            for i, model in enumerate(models)]


def workloads(count: int, prefix: str, seed: int = 0) -> list[dict[str, Any]]:
    """A seeded synthetic trace with ids ``<prefix><n>``."""
    return synthetic_trace(count, seed=seed, id_prefix=prefix)


# --- the ledger ------------------------------------------------------------------------------
@dataclass
class Ledger:
    """Exactly-once accounting of one scenario, from the topics.

    ``result_counts`` counts *records* per key on the results topic (a tombstone is no
    result); ``result_statuses`` holds each result's status.
    """

    sent_ids: set[str]
    workload_sends: Counter[str]
    result_counts: Counter[str]
    outcome_counts: Counter[str] = field(default_factory=Counter)
    result_statuses: dict[str, list[str]] = field(default_factory=dict)

    @property
    def lost(self) -> list[str]:
        return sorted(self.sent_ids - set(self.result_counts))

    @property
    def duplicated(self) -> dict[str, int]:
        return {k: n for k, n in self.result_counts.items() if n > 1 and k in self.sent_ids}

    @property
    def not_ok(self) -> dict[str, list[str]]:
        """Sent ids with a result whose status is not ``ok``."""
        return {k: v for k, v in self.result_statuses.items()
                if k in self.sent_ids and any(status != "ok" for status in v)}

    def figures(self) -> dict[str, int]:
        """Sent, results, duplicates suppressed (extra deliveries that made no second result)
        and lost."""
        resent = sum(n - 1 for k, n in self.workload_sends.items() if n > 1)
        extra_outcomes = sum(n - 1 for k, n in self.outcome_counts.items()
                             if n > 1 and k in self.sent_ids)
        return {"workloads_sent": len(self.sent_ids), "workload_deliveries": resent
                + len(self.sent_ids),
                "results": sum(self.result_counts[k] for k in self.sent_ids),
                "duplicate_results": sum(n - 1 for n in self.duplicated.values()),
                "duplicates_suppressed": resent + extra_outcomes,
                "lost": len(self.lost)}


async def _read_to_end(broker: str, topic: str) -> list[tuple[str | None, bytes | None]]:
    """Every record of ``topic`` from its beginning to its end offsets *now*, with a fresh
    consumer (no group), as (key, value); an outcomes batch as one pair per outcome."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=16 << 20)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in await _partitions(consumer, topic)]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        # Explicit offsets: seek_to_beginning only requests a reset, and a position() read
        # before it lands could start at the end (an empty ledger: seen in this suite).
        for tp, first in (await consumer.beginning_offsets(partitions)).items():
            consumer.seek(tp, first)
        out: list[tuple[str | None, bytes | None]] = []
        deadline = time.monotonic() + 120
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} to its end offsets took over 120 s")
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out += [pair for r in records
                        if r.offset < ends[TopicPartition(r.topic, r.partition)]
                        for pair in per_outcome(r.topic, r.key.decode("utf-8", "replace")
                                                if r.key is not None else None, r.value)]
        return out
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    for _ in range(50):
        await consumer._client.force_metadata_update()
        if found := consumer.partitions_for_topic(topic):
            return sorted(found)
        await asyncio.sleep(0.2)
    raise AssertionError(f"topic {topic} has no partitions")


def read_topic(broker: str, topic: str) -> list[tuple[str | None, bytes | None]]:
    """Every record of ``topic`` up to its end offsets, read afresh (not a watcher's snapshot)."""
    return asyncio.run(_read_to_end(broker, topic))


def ledger(load: Load, topics: dict[str, str], broker: str) -> Ledger:
    """The ledger of everything ``load`` sent, from results and outcomes read afresh from the
    beginning to the topics' end offsets (call it after ``wait_all_results``), not from a
    watcher's snapshot."""
    results = read_topic(broker, topics["results"])
    outcomes = read_topic(broker, topics["outcomes"])
    counts: Counter[str] = Counter()
    statuses: dict[str, list[str]] = {}
    for key, value in results:
        if key is None or value is None:
            continue  # a tombstone is no result
        counts[key] += 1
        try:
            status = str(json.loads(value).get("status"))
        except (ValueError, AttributeError):
            status = "unreadable"
        statuses.setdefault(key, []).append(status)
    return Ledger(sent_ids=set(load.send_counts), workload_sends=load.send_counts,
                  result_counts=counts,
                  outcome_counts=Counter(k for k, v in outcomes if k is not None),
                  result_statuses=statuses)


async def _group_lag(broker: str, group: str, topics: list[str]) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=None)
    await admin.start()
    await consumer.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
        # Every partition of the topics, from fresh metadata: one the group never committed
        # counts in full (a fresh consumer's metadata may not list the topic at all, and the
        # lag of such partitions was taken for 0: a revived executor "caught up" after 2 of
        # its 12 stale routes).
        partitions = [TopicPartition(topic, p) for topic in topics
                      for p in await _partitions(consumer, topic)]
        ends = await consumer.end_offsets(partitions) if partitions else {}
        return sum(max(0, end - (committed[tp].offset if tp in committed else 0))
                   for tp, end in ends.items())
    finally:
        await consumer.stop()
        await admin.close()


async def _ledger_behind_commits(broker: str, app_id: str,
                                 topics: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        committed = await admin.list_consumer_group_offsets(app_id)
        changelog = f"{app_id}-input_offsets-changelog"
        parts = [TopicPartition(changelog, p) for p in await _partitions(consumer, changelog)]
        ends = await consumer.end_offsets(parts) if parts else {}
        ledger: dict[str, int] = {}
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        async def behind() -> bool:
            return any([await consumer.position(tp) < end for tp, end in ends.items()])

        while await behind():
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                for record in records:
                    key = record.key.decode() if record.key else ""
                    key = key.strip('"')
                    if record.value is None:
                        ledger.pop(key, None)
                    else:
                        ledger[key] = int(json.loads(record.value))
        out: dict[str, int] = {}
        for tp, meta in committed.items():
            if tp.topic in topics:
                out[f"{tp.topic}[{tp.partition}]"] = (
                    meta.offset - ledger.get(f"{tp.topic}#{tp.partition}", 0))
        return out
    finally:
        await consumer.stop()
        await admin.close()


def ledger_behind_commits(broker: str, app_id: str, topics: list[str]) -> dict[str, int]:
    """Per input partition of the worker's group: its committed offset minus the next offset
    the stages' offset guard (app/gaps.py) expects, read from the ledger's changelog. Positive:
    the ledger lags the commits, and a restarted worker re-reads that many records as a gap."""
    return asyncio.run(_ledger_behind_commits(broker, app_id, topics))


def group_lag(broker: str, group: str, topics: list[str]) -> int:
    """Records of ``topics`` that consumer group ``group`` has not committed yet."""
    try:
        return asyncio.run(_group_lag(broker, group, topics))
    except KafkaError:
        return -1  # unknown right now (a rebalance, a broker restart): not caught up


async def _executor_groups(broker: str, namespace: str) -> dict[str, list[str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    try:
        listed = await admin.list_consumer_groups()
    finally:
        await admin.close()
    prefix = f"{namespace}switchyard-executor."
    return {group: [route_topic(namespace, group[len(prefix):])]
            for group, *_ in listed if group.startswith(prefix)}


def executor_groups(broker: str, namespace: str) -> dict[str, list[str]]:
    """Every executor class's consumer group in ``namespace``, with its route topic."""
    return asyncio.run(_executor_groups(broker, namespace))


def wait_all_results(watcher: TopicWatcher, topics: dict[str, str], ids: set[str],
                     timeout_s: float, broker: str, app_id: str,
                     abort: Callable[[], str | None] | None = None) -> float:
    """Wait until every id has a result and every consumer group has committed everything:
    the worker's (workloads and outcomes) and every executor class's (routes). After that a
    duplicate result would already be on the topic, so the ledger can be read to the end
    offsets."""
    took = watcher.wait(lambda: ids <= set(watcher.key_counts(topics["results"])), timeout_s,
                        f"{len(ids)} results", abort)
    namespace = topics["results"][:-len("switchyard.results")]
    everyone = {app_id: [topics["workloads"], topics["outcomes"]],
                **executor_groups(broker, namespace)}
    for group, group_topics in everyone.items():
        watcher.wait(lambda g=group, t=group_topics: group_lag(broker, g, t) == 0, 120,
                     f"consumer group {group} committing everything", abort)
    return took


def assert_exactly_once(book: Ledger) -> None:
    """Every sent id has exactly one result record, and it says ``ok``."""
    assert not book.lost, f"{len(book.lost)} workloads lost: {book.lost[:10]}"
    assert not book.duplicated, f"duplicate results: {dict(list(book.duplicated.items())[:10])}"
    assert not book.not_ok, f"results not ok: {dict(list(book.not_ok.items())[:10])}"


def alive_check(*procs: Proc) -> Callable[[], str | None]:
    """An abort check: the reason one of ``procs`` is unusable (it exited), or None."""
    def check() -> str | None:
        for proc in procs:
            if not proc.alive():
                return f"{proc.name} exited:\n{proc.log_tail()}"
        return None
    return check


def model_samples(cluster: LocalCluster, web_port: int | None = None) -> dict[str, int]:
    """Samples learned per device class, from /api/models."""
    return {m["device_class"]: int(m["samples"])
            for m in cluster.api("/api/models", web_port)["models"]}


SKIPPED_LINE = re.compile(r"the consumer skipped .* re-read (\d+) record")


def skipped_records_recovered(*procs: Proc) -> int:
    """Records Faust's consumer skipped that the stages' offset guard read back and processed
    (app/gaps.py), counted from the workers' logs."""
    logs = {proc.log: proc for proc in procs}  # a restarted worker appends to the same log
    return sum(int(m.group(1)) for proc in logs.values()
               for m in SKIPPED_LINE.finditer(proc.log_tail(10**9)))


def crashed_agents(log_text: str) -> list[str]:
    """Lines of a worker log that say an agent or the worker crashed."""
    markers = ("Agent crashed", "crashed reason", "Traceback (most recent call last)")
    return [line for line in log_text.splitlines() if any(m in line for m in markers)]


# --- figures -------------------------------------------------------------------------------
def record_figures(scenario: str, scale: Scale, values: dict[str, Any]) -> None:
    """Print a scenario's figures and, when the long mode asks, add them to its JSON file."""
    print(f"\nRELIABILITY {scenario} [{scale.name}] {json.dumps(values, sort_keys=True)}")
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    target = Path(path)
    data = json.loads(target.read_text()) if target.exists() else {}
    data[f"{scenario}/{scale.name}"] = {"scenario": scenario, "scale": scale.name,
                                        "at": time.strftime("%Y-%m-%d %H:%M"), **values}
    target.write_text(json.dumps(data, indent=1, sort_keys=True))


STALLED = "stalled"


def stall_guard(watcher: TopicWatcher, topic: str, proc: Proc, dump: Path,
                after_s: float = 60.0,
                health: Callable[[], Any] | None = None) -> Callable[[], str | None]:
    """An abort check for a worker that is alive but has stopped working: once ``topic`` has
    had no new record for ``after_s`` seconds, save the worker's thread stacks (py-spy) and
    its coroutine stacks (SIGUSR1 makes the Faust worker log them) to ``dump``, with its
    /api/health answer (which partitions its consumer is not fetching, and why) when
    ``health`` reads it, and abort with a reason starting with STALLED."""
    state = {"count": -1, "since": time.monotonic()}

    def check() -> str | None:
        count = len(watcher.records(topic))
        if count != state["count"]:
            state.update(count=count, since=time.monotonic())
            return None
        if time.monotonic() - state["since"] < after_s or not proc.alive():
            return None
        spy = Path(sys.executable).with_name("py-spy")
        with dump.open("w") as out:
            if health is not None:
                out.write(f"/api/health: {json.dumps(health(), indent=1)}\n\n")
                out.flush()
            if spy.exists():
                subprocess.run([str(spy), "dump", "--pid", str(proc.popen.pid)],
                               stdout=out, stderr=subprocess.STDOUT, timeout=60)
        proc.popen.send_signal(signal.SIGUSR1)  # coroutine stacks, into the worker's log
        return (f"{STALLED}: no new record on {topic} for {after_s:.0f} s while "
                f"{proc.name} is alive; stacks in {dump} and {proc.log}")
    return check


def all_of(*checks: Callable[[], str | None]) -> Callable[[], str | None]:
    """An abort check that runs each of ``checks``; the first reason wins."""
    def check() -> str | None:
        for one in checks:
            if reason := one():
                return reason
        return None
    return check
