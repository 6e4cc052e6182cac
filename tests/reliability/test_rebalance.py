"""Rebalance: a second worker joins mid-trace, then the first leaves (SIGTERM).

Partitions, and the tables co-partitioned with them, move twice while work flows. Every
workload still has exactly one result, and the worker left standing serves cost models that
carry on from where the first worker had them: no learned sample is lost at the handoff.
"""

from __future__ import annotations

import signal
import time

import pytest

from app.local import LocalCluster, free_port
from tests.reliability.harness import (
    SCALES,
    Scale,
    alive_check,
    all_of,
    assert_exactly_once,
    crashed_agents,
    ledger,
    model_samples,
    new_cluster,
    record_figures,
    skipped_records_recovered,
    stall_guard,
    start_executors,
    topic_names,
    wait_all_results,
    workloads,
)
from tests.reliability.watch import Load, TopicWatcher

pytestmark = pytest.mark.kafka


def caught_up_models(cluster: LocalCluster, web_port: int, floor: dict[str, int],
                     timeout_s: float = 20.0) -> dict[str, int]:
    """The samples per class the worker on ``web_port`` serves, once its copy of the global
    models table has caught up with ``floor`` (or after ``timeout_s``: then as they are)."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = model_samples(cluster, web_port)
        if all(samples.get(c, 0) >= n for c, n in floor.items()) or time.monotonic() > deadline:
            return samples
        time.sleep(0.5)


@pytest.mark.parametrize("scale", SCALES)
def test_worker_joins_then_one_leaves_mid_trace(broker, workdir, scale: Scale):
    """Join at a fifth of the results, leave once both are ready: one result per workload."""
    cluster = new_cluster(workdir, broker)
    names = topic_names(cluster.namespace)
    port_b = free_port()
    with cluster:
        first = cluster.start_worker("worker-a")
        executors = start_executors(cluster, ["h100", "a100"])
        cluster.wait_ready(first, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        watcher = TopicWatcher(broker, [names["results"], names["outcomes"]]).start()
        # The last fifth of the trace is held back until the first worker has left, so the
        # join and the leave happen mid-trace however long they take on this machine.
        rate = scale.workloads / (60.0 if scale.name == "bounded" else 180.0)
        load = Load(broker, names["workloads"], workloads(scale.workloads, "rb-"), rate,
                    duplicate_every=25, hold_at=scale.workloads * 4 // 5).start()

        def results() -> int:
            return len(watcher.key_counts(names["results"]))

        try:
            watcher.wait(lambda: results() >= scale.workloads // 5, 180, "a fifth of the results",
                         alive_check(first, *executors))
            joined_at = time.monotonic()
            second = cluster.start_worker("worker-b", web_port=port_b,
                                          data_dir=workdir / "worker-b-data")
            cluster.wait_ready(second, 240, web_port=port_b)
            cluster.wait_ready(first, 240)
            join_s = time.monotonic() - joined_at
            before_leave = model_samples(cluster)
            sent_at_leave = load.sent
            left_at = time.monotonic()
            cluster.kill(first, signal.SIGTERM)  # a clean leave: partitions move at once
            cluster.wait_ready(second, 240, web_port=port_b)
            leave_s = time.monotonic() - left_at
            load.release.set()
            after_leave = caught_up_models(cluster, port_b, before_leave)
            load.join(scale.workloads / rate + 240)
            # A worker that holds its partitions and produces nothing fails here, with its
            # stacks and /api/health saved (the offset guard closed the one known cause).
            wait_all_results(watcher, names, set(load.send_counts), 300, broker,
                             cluster.app_id, all_of(alive_check(second, *executors),
                                                    stall_guard(
                                                        watcher, names["results"], second,
                                                        workdir / "stall.txt",
                                                        health=lambda: cluster.health(port_b))))
            book = ledger(load, names, broker)
        finally:
            load.close()
            watcher.close()
        record_figures("rebalance", scale, {
            **book.figures(), "join_to_both_ready_s": round(join_s, 1),
            "leave_to_ready_s": round(leave_s, 1), "models_before_leave": before_leave,
            "models_after_leave": after_leave,
            "sent_before_join_leave_after": [scale.workloads // 5, sent_at_leave],
            "skipped_records_recovered": skipped_records_recovered(first, second),
        })
        assert sent_at_leave < scale.workloads, "the trace ended before the leave"
        assert_exactly_once(book)
        assert not crashed_agents(second.log_tail(10**9))
        for device_class, samples in before_leave.items():
            # Not cold: the model the standing worker serves kept (nearly) all it had learned.
            assert after_leave.get(device_class, 0) >= samples / 2 > 0, (before_leave,
                                                                         after_leave)
        regressed = {c: (n, after_leave.get(c, 0)) for c, n in before_leave.items()
                     if after_leave.get(c, 0) < n}
        # Nothing learned is lost at the handoff: learn keeps each class's model in a table
        # partitioned with its metrics, recovered before the partition resumes (app/tables.py).
        # Updating the background-read global copy instead once lost a batch (59 -> 52).
        assert not regressed, f"cost-model samples went back during the handoff: {regressed}"
