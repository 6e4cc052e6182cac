"""Broker restart mid-trace: the (only) Kafka broker stops and starts again, data kept.

The scenario runs on its own broker (own port and data dir), so the shared broker and other
sessions' tests are not disturbed. The worker and executors are not touched: they must
reconnect by themselves, and every workload still gets exactly one result.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import kafka_local
from app.local import free_port
from tests.reliability.harness import (
    SCALES,
    Scale,
    alive_check,
    assert_exactly_once,
    crashed_agents,
    ledger,
    new_cluster,
    record_figures,
    start_executors,
    topic_names,
    wait_all_results,
    workloads,
)
from tests.reliability.watch import Load, TopicWatcher

pytestmark = pytest.mark.kafka


def _port_pair() -> int:
    """A client port whose successor (the controller port) is free too."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of ports")


@pytest.fixture(scope="module")
def own_broker(broker: str) -> Iterator[tuple[str, int, Path]]:
    """A second local broker for this module: (bootstrap, port, data dir)."""
    data_dir = Path(f"/tmp/sy-reliability/broker-{time.strftime('%H%M%S')}")
    port = _port_pair()
    bootstrap = kafka_local.start(port, data_dir)
    yield bootstrap, port, data_dir
    kafka_local.stop(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.parametrize("scale", SCALES)
def test_broker_restart_mid_trace_loses_nothing(own_broker, workdir, scale: Scale):
    """Stop the broker at a third of the trace, start it again: all results, once each."""
    bootstrap, port, data_dir = own_broker
    cluster = new_cluster(workdir, bootstrap)
    names = topic_names(cluster.namespace)
    with cluster:
        worker = cluster.start_worker()
        executors = start_executors(cluster, ["h100", "a100"])
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        everyone = alive_check(worker, *executors)
        watcher = TopicWatcher(bootstrap, [names["results"], names["outcomes"]]).start()
        load = Load(bootstrap, names["workloads"], workloads(scale.workloads, "brk-"),
                    scale.rate, duplicate_every=25).start()
        try:
            watcher.wait(lambda: len(watcher.key_counts(names["results"])) >= scale.workloads // 3,
                         180, "a third of the results", everyone)
            stopped_at = time.monotonic()
            assert kafka_local.stop(data_dir)
            retries = load.retries
            # Down until the clients have noticed (the load's sends failing), at least 3 s.
            watcher.wait(lambda: load.retries > retries and time.monotonic() - stopped_at > 3,
                         60, "the clients noticing the broker is gone", alive_check(worker))
            done_before = set(watcher.key_counts(names["results"]))
            kafka_local.start(port, data_dir)
            back_at = time.monotonic()
            down_s = back_at - stopped_at
            watcher.wait(lambda: len(set(watcher.key_counts(names["results"])) - done_before) > 0,
                         240, "a new result after the broker came back", alive_check(worker))
            next_result_s = time.monotonic() - back_at
            # An executor that did not survive the outage is restarted, as its supervisor
            # would, so the rest of the guarantees are still checked; the test then xfails.
            died = [p for p in executors if not p.alive()]
            for proc in died:
                executors.append(cluster.start_executor("sim", proc.name.split("-")[1],
                                                        device_id=proc.name))
            executors = [p for p in executors if p.alive()]
            everyone = alive_check(worker, *executors)
            load.join(scale.workloads / scale.rate + 300)
            wait_all_results(watcher, names, set(load.send_counts), 300, bootstrap,
                             cluster.app_id, everyone)
            book = ledger(load, watcher, names)
        finally:
            load.close()
            watcher.close()
        record_figures("broker_restart", scale, {
            **book.figures(), "broker_down_s": round(down_s, 1),
            "broker_back_to_next_result_s": round(next_result_s, 1),
            "client_send_retries": load.retries, "executors_died": [p.name for p in died],
        })
        assert_exactly_once(book)
        assert worker.alive() and all(p.alive() for p in executors)
        assert not crashed_agents(worker.log_tail(10**9))
        if died:
            # Known bug, reported to app/executor.py's owner: Executor._send does not retry a
            # KafkaError, so an executor publishing while the broker is away exits.
            pytest.xfail(f"{[p.name for p in died]} exited during the broker outage: "
                         f"{died[0].log_tail(400).strip().splitlines()[-1]}")
