"""The worker's state: Faust tables on the RocksDB store, each backed by a changelog topic.

| table | key | value | who writes | partitioning |
|---|---|---|---|---|
| completed | workload id (bytes) | its one result, `ResultRecord` JSON bytes (changelog = switchyard.results) | complete | by workload id |
| inflight | "<partition>:<first offset>" of a decide batch | its routed, unfinished work by workload id (models/inflight.py) | decide, complete | by workload partition |
| input_offsets | "<topic>#<partition>" | the next workload/outcome offset the stage expects (app/gaps.py) | decide, complete | by workload id |
| devices (global) | device id | last heartbeat and when it was seen | registry | by device class |
| class_models | device class | the class's cost model: learn's own state | learn | by device class |
| class_history | device class | StarPU-style history (the dmda baseline): learn's own | learn | by device class |
| models (global) | device class | a copy of class_models that every decider reads | learn | by device class |
| history (global) | device class | a copy of class_history | learn | by device class |
| tumbling, hopping | "<class>|<op kind>" | window statistics | window | by device class |
| backlog_shares (global) | worker id | that worker's routed, unfinished work per class, and when | every worker, on a timer | partition 0 |

The in-flight book (workload id → entry), the backlog per class and the ring of recent
decisions are derived from these and kept in memory (agents/state.py); each worker publishes its backlog's totals to ``backlog_shares`` so
that every worker waits on the whole class's queue, not only its own partitions' part.

Global tables are read by every worker, so any decider sees every class's model and devices.
The learn stage reads and updates its *partitioned* tables and publishes a copy to the global
ones: a partitioned table is recovered to the end of its changelog before the stream of its
partition resumes, so the worker that takes over a class after a rebalance starts from the
previous owner's last model. A global table is read in the background and may lag at the handoff
(updating such a copy lost the last batch of samples: tests/reliability/test_rebalance.py).
Writes happen inside stream iteration, so each change lands in the changelog partition of the
event that caused it: state stays co-partitioned with its source and moves with it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.main import app, settings


def store() -> dict[str, Any]:
    """Bounded RocksDB memory for every table partition (see Settings.rocksdb_*); a fresh
    dict per table, since Faust's store pops its own keys from it."""
    return {"options": {
        "write_buffer_size": settings.rocksdb_write_buffer_mib * 1024 * 1024,
        "max_write_buffer_number": 2,
        "block_cache_size": settings.rocksdb_block_cache_mib * 1024 * 1024,
        "block_cache_compressed_size": 1024 * 1024,
    }}


def global_table(partitions: int) -> dict[str, Any]:
    """Options of a global table: every worker follows every changelog partition for as
    long as it runs. Faust otherwise reads, after recovery, only the partitions active on no
    other worker (``synchronize_all_active_partitions``; faust-streaming issue 283): with two
    workers, each stopped seeing the heartbeats, models and backlog shares written to the
    other's partitions (tests/integration/test_shared_backlog.py)."""
    return {**store(), "key_type": str, "default": None, "partitions": partitions,
            "synchronize_all_active_partitions": True,
            # Those partitions stay "active" to Faust's recovery after it completes, and it
            # applies active changelog records in batches of this many: 1 (as Faust sets for
            # standbys) so that a heartbeat written by the other worker counts at once.
            "recovery_buffer_size": 1}


completed = app.Table(
    "completed", **store(),
    # bytes keys are written raw: the results topic's keys are the plain UTF-8 workload ids.
    key_type=bytes,
    # Values are a ``ResultRecord``'s JSON bytes, written as the complete stage made them
    # (agents/complete.py ``result_bytes``): the table serialised a Faust record twice per
    # result (changelog and store), the most of the complete stage's cost.
    value_type=bytes,  # serialised "raw" (Faust's serialiser for bytes)
    partitions=settings.workload_partitions,
    # The completion table's changelog *is* the contract's results topic: setting a key and
    # publishing the one result are the same write, and recovery rebuilds the set of completed
    # workloads from what consumers saw. That is what makes results exactly-once visible.
    changelog_topic=app.topic(
        settings.topic_names.results,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.workload_partitions,
        compacting=True,
        deleting=True,
        retention=timedelta(days=7),
    ),
)

inflight = app.Table("inflight", **store(), key_type=str, default=None,
                     partitions=settings.workload_partitions)
input_offsets = app.Table("input_offsets", **store(), key_type=str, default=None,
                          partitions=settings.workload_partitions)

devices = app.GlobalTable("devices", **global_table(settings.metric_partitions))
class_models = app.Table("class_models", **store(), key_type=str, default=None,
                         partitions=settings.metric_partitions)
class_history = app.Table("class_history", **store(), key_type=str, default=None,
                          partitions=settings.metric_partitions)
models = app.GlobalTable("models", **global_table(settings.metric_partitions))
history = app.GlobalTable("history", **global_table(settings.metric_partitions))
backlog_shares = app.GlobalTable("backlog_shares", **global_table(settings.workload_partitions))

# Faust's cleanup drops an expired window from the local store without a changelog tombstone,
# so the changelogs kept every window ever made (durable state and restart time growing with
# uptime; tests/reliability/test_soak.py). The window agent deletes windows — tombstone
# included — once they are ``window_expires_s`` old; Faust's own expiry comes later (three
# of the agent's 10 s sweeps) and only catches what the agent could not reach.
FAUST_WINDOW_EXPIRES = timedelta(seconds=settings.window_expires_s + 30.0)

tumbling = app.Table(
    "window_tumbling", **store(), key_type=str, default=dict,
    partitions=settings.metric_partitions,
).tumbling(settings.tumbling_window_s, expires=FAUST_WINDOW_EXPIRES)
hopping = app.Table(
    "window_hopping", **store(), key_type=str, default=dict,
    partitions=settings.metric_partitions,
).hopping(settings.hopping_window_s, settings.hopping_step_s,
          expires=FAUST_WINDOW_EXPIRES)
