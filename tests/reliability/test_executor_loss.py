"""Executor loss: ``kill -9`` an executor with work queued behind it.

The victim is the only device of its class and slow (a sim CPU core with a slowdown file), so
the workloads routed to it queue on its route topic. Once its heartbeats stop for the device
timeout, the registry asks for its in-flight work to be routed again, and it completes on the
surviving class. Then the victim's class comes back and works off its stale queue: every one
of those outcomes is a duplicate the worker must drop. None lost, none with two results.
"""

from __future__ import annotations

import time

import pytest

from tests.reliability.harness import (
    DEVICE_TIMEOUT_S,
    SCALES,
    Scale,
    alive_check,
    assert_exactly_once,
    group_lag,
    ledger,
    new_cluster,
    record_figures,
    route_topic,
    topic_names,
    wait_all_results,
    workloads,
)
from tests.reliability.watch import Load, TopicWatcher

pytestmark = pytest.mark.kafka
VICTIM_CLASS = "sim-cpu-core"
SURVIVOR_CLASS = "sim-h100"
# A 1024^3 matmul takes ~11 ms on the simulated core; a slowdown of 1000 makes it ~11 s, so
# everything routed to the victim is still queued when it dies.
BIG_MATMUL = {"kind": "matmul", "m": 1024, "k": 1024, "n": 1024, "dtype": "float32"}


def _queued(count: int) -> list[dict]:  # type: ignore[type-arg]
    return [{"id": f"queued-{i:04d}", "op": dict(BIG_MATMUL), "precisions": ["fp32"]}
            for i in range(count)]


@pytest.mark.parametrize("scale", SCALES)
def test_executor_kill9_reroutes_its_queue_and_drops_late_duplicates(broker, workdir,
                                                                     scale: Scale):
    """Queued work of a killed executor completes elsewhere; its late outcomes are dropped."""
    queued_count = 12 if scale.name == "bounded" else 40
    cluster = new_cluster(workdir, broker)
    names = topic_names(cluster.namespace)
    victim_routes = route_topic(cluster.namespace, VICTIM_CLASS)
    slowdown = workdir / "slowdown"
    slowdown.write_text("1000")
    with cluster:
        worker = cluster.start_worker()
        victim = cluster.start_executor("sim", "cpu-core", device_id="victim",
                                        slowdown_file=slowdown)
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([victim.name], 120)
        watcher = TopicWatcher(broker, [names["results"], names["outcomes"], victim_routes,
                                        route_topic(cluster.namespace, SURVIVOR_CLASS)]).start()
        first = Load(broker, names["workloads"], _queued(queued_count), rate=100).start()
        later: Load | None = None
        try:
            first.join(60)
            watcher.wait(lambda: len(watcher.key_counts(victim_routes)) >= queued_count, 120,
                         "every queued workload routed to the victim", alive_check(worker))
            survivor = cluster.start_executor("sim", "h100", device_id="survivor")
            cluster.wait_devices([survivor.name], 120)
            done_by_victim = {r.key for r in watcher.records(names["outcomes"])}
            cluster.kill(victim)  # SIGKILL: no last heartbeat, no leaving the group
            killed_at = time.monotonic()
            later = Load(broker, names["workloads"], workloads(scale.workloads, "after-"),
                         scale.rate).start()
            queued_ids = set(first.send_counts) - done_by_victim
            watcher.wait(lambda: queued_ids <= set(watcher.key_counts(names["results"])),
                         120 + float(DEVICE_TIMEOUT_S), "the victim's queue completing elsewhere",
                         alive_check(worker, survivor))
            rerouted_s = max(r.seen_at for r in watcher.records(names["results"])
                             if r.key in queued_ids) - killed_at
            later.join(scale.workloads / scale.rate + 120)
            # The victim's class comes back, without the slowdown, and redoes its stale queue.
            revived = cluster.start_executor("sim", "cpu-core", device_id="revived")
            executor_group = f"{cluster.namespace}switchyard-executor.{VICTIM_CLASS}"
            watcher.wait(lambda: group_lag(broker, executor_group, [victim_routes]) == 0, 120,
                         "the revived executor working off the stale queue",
                         alive_check(worker, survivor, revived))
            sent = set(first.send_counts) | set(later.send_counts)
            wait_all_results(watcher, names, sent, 180, broker, cluster.app_id,
                             alive_check(worker, survivor, revived))
            book = ledger(first, names, broker)
            book.sent_ids |= set(later.send_counts)
            book.workload_sends.update(later.send_counts)
        finally:
            first.close()
            if later is not None:
                later.close()
            watcher.close()
        results = {r.key: r.json() for r in watcher.records(names["results"])}
        completed_elsewhere = [i for i in queued_ids
                               if results[i]["device_class"] == SURVIVOR_CLASS]
        record_figures("executor_loss", scale, {
            **book.figures(), "queued_at_kill": len(queued_ids),
            "completed_elsewhere": len(completed_elsewhere),
            "kill_to_last_queued_result_s": round(rerouted_s, 1),
            "device_timeout_s": float(DEVICE_TIMEOUT_S),
        })
        assert_exactly_once(book)
        assert queued_ids, "the victim had nothing queued when it died"
        assert len(completed_elsewhere) == len(queued_ids)
        # The revived executor redid the victim's uncommitted queue: each of those workloads
        # has a second outcome, which the worker dropped (the "late duplicates" path).
        single = sorted(i for i in queued_ids if book.outcome_counts[i] < 2)
        assert not single, f"the stale queue was not redone for {single[:10]}"
