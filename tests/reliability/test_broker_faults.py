"""Broker faults mid-trace: the (only) Kafka broker is stopped cleanly, killed with SIGKILL,
or paused with SIGSTOP for longer than the executors' request timeout and resumed — once in
the bounded form, ten times in a row in the long one.

The scenario runs on its own broker (own port and data dir), so the shared broker and other
sessions' tests are not disturbed. The worker and executors are not touched: they must
reconnect by themselves, and every workload still gets exactly one result *record* on
switchyard.results — a produce request retried across the fault must not be appended twice
(issue 11: ``brk-000087`` had two results after a broker restart, from Faust's producer,
which is not idempotent under at-least-once; app/faust_patches.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
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
FAULTS = ("stop", "kill", "pause")
# The executors' producers give up on a request after this long (and retry it): a pause
# longer than that makes them retry requests the broker has not answered yet, the case an
# idempotent producer exists for.
EXECUTOR_REQUEST_TIMEOUT_S = 4.0
PAUSE_S = 3 * EXECUTOR_REQUEST_TIMEOUT_S
CLASSES = ("h100", "a100")


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
    data_dir = Path(f"/tmp/sy-reliability/broker-{time.strftime('%H%M%S')}-{os.getpid()}")
    port = _port_pair()
    bootstrap = kafka_local.start(port, data_dir)
    yield bootstrap, port, data_dir
    kafka_local.stop(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)


def _broker_pid(data_dir: Path) -> int:
    pid = kafka_local.read_pid(kafka_local.BrokerPaths(data_dir.resolve()))
    assert pid is not None, "the test's broker is not running"
    return pid


def inject(fault: str, port: int, data_dir: Path,
           noticed: Callable[[float], None]) -> float:
    """Inflict one ``fault`` on the broker and bring it back; the seconds it was away.

    ``noticed(since)`` waits until the clients have noticed (called while the broker is away).
    """
    began = time.monotonic()
    if fault == "stop":
        assert kafka_local.stop(data_dir)
        noticed(began)
        kafka_local.start(port, data_dir)
    elif fault == "kill":
        pid = _broker_pid(data_dir)
        os.kill(pid, signal.SIGKILL)
        while kafka_local.read_pid(kafka_local.BrokerPaths(data_dir.resolve())) is not None:
            time.sleep(0.1)
        noticed(began)
        kafka_local.start(port, data_dir)  # log recovery after an unclean stop
    elif fault == "pause":
        pid = _broker_pid(data_dir)
        os.kill(pid, signal.SIGSTOP)
        try:
            noticed(began)
            time.sleep(max(0.0, PAUSE_S - (time.monotonic() - began)))
        finally:
            os.kill(pid, signal.SIGCONT)
        kafka_local.wait_ready(f"127.0.0.1:{port}")
    else:
        raise ValueError(fault)
    return time.monotonic() - began


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("fault", FAULTS)
def test_broker_fault_mid_trace_loses_and_duplicates_nothing(own_broker, workdir, fault: str,
                                                             scale: Scale):
    """Every fault of the form mid-trace: all results, one record each, every process alive."""
    bootstrap, port, data_dir = own_broker
    repeats = 1 if scale.name == "bounded" else 10
    cluster = new_cluster(workdir, bootstrap, SWITCHYARD_EXECUTOR_REQUEST_TIMEOUT_S=str(
        EXECUTOR_REQUEST_TIMEOUT_S))
    names = topic_names(cluster.namespace)
    count = scale.workloads * (1 if repeats == 1 else 2)
    with cluster:
        worker = cluster.start_worker()
        executors = start_executors(cluster, CLASSES)
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        everyone = alive_check(worker, *executors)
        watcher = TopicWatcher(bootstrap, [names["results"], names["outcomes"]]).start()
        load = Load(bootstrap, names["workloads"], workloads(count, f"brk-{fault}-"),
                    scale.rate, duplicate_every=25).start()
        down_s: list[float] = []
        next_result_s: list[float] = []
        try:
            for n in range(repeats):
                # Each fault lands mid-trace: after (n+1)/(repeats+2) of the results.
                goal = count * (n + 1) // (repeats + 2)
                watcher.wait(lambda g=goal: len(watcher.key_counts(names["results"])) >= g,
                             240, f"{goal} results before fault {n + 1}", everyone)

                def noticed(since: float) -> None:
                    # Away for 3 s at least, and until the load's sends have stopped going
                    # through (its idempotent producer retries by itself, so no error shows).
                    progress = {"sent": load.sent, "at": time.monotonic()}

                    def stalled() -> bool:
                        if load.sent != progress["sent"]:
                            progress.update(sent=load.sent, at=time.monotonic())
                        return (time.monotonic() - since > 3
                                and time.monotonic() - progress["at"] > 1.0)
                    watcher.wait(stalled, 120, "the clients noticing the broker is gone",
                                 everyone)

                done_before = set(watcher.key_counts(names["results"]))
                down_s.append(inject(fault, port, data_dir, noticed))
                back_at = time.monotonic()
                watcher.wait(lambda d=done_before: bool(
                    set(watcher.key_counts(names["results"])) - d), 240,
                    f"a new result after fault {n + 1}", everyone)
                next_result_s.append(time.monotonic() - back_at)
            # The load's own pace, plus its waits through the faults.
            load.join(count / scale.rate + sum(down_s) + 300)
            wait_all_results(watcher, names, set(load.send_counts), 300, bootstrap,
                             cluster.app_id, everyone)
            book = ledger(load, names, bootstrap)
        finally:
            load.close()
            watcher.close()
        record_figures(f"broker_{fault}", scale, {
            **book.figures(), "faults": repeats, "broker_down_s_max": round(max(down_s), 1),
            "broker_back_to_next_result_s_max": round(max(next_result_s), 1),
            "broker_back_to_next_result_s_median": round(sorted(next_result_s)[
                len(next_result_s) // 2], 1),
        })
        # Executors and the worker ride out every fault by themselves: none may exit.
        assert worker.alive() and all(p.alive() for p in executors), everyone()
        assert_exactly_once(book)
        assert not crashed_agents(worker.log_tail(10**9))
