"""Worker crash: ``kill -9`` the Faust worker mid-trace and restart it on the same data dir.

Every workload must end with exactly one result on switchyard.results, and the worker's state
must come back from its changelogs: devices, windows, and cost models that carry on rather than
start cold. The recovery time is reported.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.local import LocalCluster
from tests.reliability.harness import (
    SCALES,
    Scale,
    alive_check,
    all_of,
    assert_exactly_once,
    crashed_agents,
    ledger,
    ledger_behind_commits,
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


def _state(cluster: LocalCluster) -> dict[str, Any]:
    """What the web view says about the recovered tables."""
    return {
        "models": model_samples(cluster),
        "devices": sorted(d["device_id"] for d in cluster.api("/api/devices")["devices"]),
        "windows": sorted({(w["device_class"], w["op_kind"])
                           for w in cluster.api("/api/windows")["windows"]}),
    }


@pytest.mark.parametrize("scale", SCALES)
def test_worker_kill9_mid_trace_loses_and_duplicates_nothing(broker, workdir,
                                                          scale: Scale):
    """kill -9 at a third of the trace; restart; every id has one result; state recovered."""
    cluster = new_cluster(workdir, broker)
    names = topic_names(cluster.namespace)
    with cluster:
        worker = cluster.start_worker()
        executors = start_executors(cluster, ["h100", "a100"])
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        watcher = TopicWatcher(broker, [names["results"], names["outcomes"]]).start()
        load = Load(broker, names["workloads"], workloads(scale.workloads, "crash-"),
                    scale.rate, duplicate_every=25).start()
        try:
            watcher.wait(lambda: len(watcher.key_counts(names["results"])) >= scale.workloads // 3,
                         180, "a third of the results", alive_check(worker, *executors))
            before = _state(cluster)
            cluster.kill(worker)  # SIGKILL: no shutdown, no final commit, no flush
            # Read while nothing runs: the group's commits and the ledger are final. The clock
            # starts after the read, as if the restart had followed the kill at once.
            behind = ledger_behind_commits(broker, cluster.app_id,
                                           [names["workloads"], names["outcomes"]])
            print(f"\nledger behind the committed offsets at the kill: {behind}")
            killed_at, killed_wall = time.monotonic(), time.time()
            restarted = cluster.start_worker()  # same name: same data dir and web port
            cluster.wait_ready(restarted, 240)
            ready_s = time.monotonic() - killed_at
            after = _state(cluster)
            load.join(scale.workloads / scale.rate + 240)
            sent_ids = set(load.send_counts)
            # A worker that holds its partitions and produces nothing fails here, with its
            # stacks and /api/health saved (the offset guard closed the one known cause).
            wait_all_results(watcher, names, sent_ids, 240, broker, cluster.app_id, all_of(
                alive_check(restarted, *executors),
                stall_guard(watcher, names["results"], restarted,
                            workdir / "worker-stall.txt", health=lambda: cluster.health())))
            book = ledger(load, names, broker)
            final_models = model_samples(cluster)
        finally:
            load.close()
            watcher.close()
        # The first result the restarted worker produced (a record stamped after the kill: the
        # killed worker can have written none), not one the dead worker left in flight.
        next_result_s = min(r.timestamp_s for r in watcher.records(names["results"])
                            if r.timestamp_s > killed_wall) - killed_wall
        record_figures("worker_crash", scale, {
            **book.figures(), "kill_to_ready_s": round(ready_s, 1),
            "kill_to_next_result_s": round(next_result_s, 1),
            "models_before": before["models"], "models_after_restart": after["models"],
            "models_at_end": final_models,
            "skipped_records_recovered": skipped_records_recovered(worker, restarted),
            "ledger_behind_commits_at_kill": sum(max(0, n) for n in behind.values()),
        })
        assert_exactly_once(book)
        # The guard's ledger is written before the offsets it covers are committed (the
        # producer is flushed before every commit), so a restart never takes committed work
        # for a gap.
        assert all(n <= 0 for n in behind.values()), behind
        for device_class, samples in before["models"].items():
            # Not cold: the restored model has what reached its changelog before the kill (the
            # last batch's update may not have; its metrics are redelivered and learned again).
            assert after["models"].get(device_class, 0) >= samples / 2 > 0, (
                f"{device_class}'s model restarted cold: {before['models']} -> {after['models']}")
        assert sum(final_models.values()) >= sum(before["models"].values()), final_models
        assert set(before["devices"]) <= set(after["devices"])
        assert set(before["windows"]) <= set(after["windows"])
        assert not crashed_agents(restarted.log_tail(10**7))
