"""``switchyard bench pipeline``: how fast the stream stages are, on the real broker.

1. Metric path: N synthetic metric records are produced into a fresh namespace's metrics topic
   (partitioned by device class, as executors do) *before* a fresh worker starts; the worker's
   consumer group then works through the backlog with its window and learn stages. Throughput
   is the slope of the group's committed offsets (10 % → 90 % of N). In the same run, a raw
   aiokafka consumer (``getmany`` + ``json.loads``) reads the same topic: the ceiling.
2. Decide path: workloads at fixed offered loads on a worker with fast sim executors; decision
   latency = route record timestamp − workload record timestamp (both Kafka CreateTime);
   Kafka round trip per workload = completion − queue − execution. The CPU time each process
   (worker, executors, broker, this load generator) spent over a load, divided by its
   workloads, says what one workload costs where.
3. Worker capacity (bench/hotpath.py): a burst of workloads, faster than one pinned worker
   takes them, through decide, complete, learn and window, with instant (SIMULATED) executors
   in this process; results/s, the worker's CPU µs per workload and each stage's share.
4. Executor capacity (bench/executor_capacity.py): a burst of routes, faster than one pinned
   sim executor takes them, and no worker; routes/s and the executor's CPU µs per route.
5. Sustained load (bench/sustained.py): 1,000 workloads/s for a minute through the broker, one
   worker and two sim executors; results lost or duplicated, and whether it kept up.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.local import LocalCluster
from app.records import metric_batch_bytes, metric_columns_bytes, metric_count
from app.topics import class_partition
from bench.common import (
    fmt,
    machine,
    markdown_table,
    now_utc,
    pyplot,
    save_figure,
    section_header,
    summarize,
    update_benchmarks_md,
    write_json,
)
from bench.harness import (
    BROKER,
    ExecutorSpec,
    run_trace,
    start_cluster,
    stop_and_delete_topics,
    topic,
)
from bench.kafka_floor import kafka_floor
from bench.sustained import report_sustained, sustained
from models.traces import poisson_gaps, synthetic_trace

WORKDIR = Path(os.environ.get("SWITCHYARD_BENCH_WORKDIR", "/tmp/switchyard-bench")) / "pipeline"
CPU_ROLES = ("worker", "executors", "broker", "load generator")
FLOOR_RATE_PER_S = 25.0  # issue 12's round-trip goal is stated at 25 workloads/s
SUSTAINED_RATE_PER_S = 1000.0  # issue 12's end-to-end goal: 1,000 workloads/s for a minute
METRIC_PARTITIONS = 4  # the settings' default metric_partitions
# Rows per metrics record, the record's form, and its metrics as a multiple of the one-row
# form's: one execution a record; an executor's batch under load (the rows it ran within its
# linger, up to executor_metric_batch_rows) as row objects (version 2) and column-wise
# (version 3, what executors publish). Faster forms get more metrics, so that the slope spans
# several of the worker's 1 s offset commits: 500,000 columnar rows took ~2-3 s, and runs of
# the same metric stage measured 265,758 and 172,011 rows/s at the same CPU per row (3.1 µs).
METRIC_FORMS: tuple[tuple[int, str, int], ...] = ((1, "row", 1), (64, "objects", 5),
                                                  (64, "columns", 20))
FORM_NAMES = {"row": "one row", "objects": "v2 row objects", "columns": "v3 columnar"}
METRIC_CLASSES = ("sim-h100", "sim-l4", "sim-tpu-v5e", "sim-cpu-core", "torch-cpu-x86",
                  "jax-cpu-x86", "numpy-cpu-x86")
METRIC_OPS = (
    {"kind": "matmul", "m": 128, "k": 128, "n": 128, "dtype": "float32"},
    {"kind": "softmax", "rows": 256, "dim": 256, "dtype": "float32"},
    {"kind": "linear", "batch": 64, "in_features": 256, "out_features": 256, "bias": True,
     "activation": "gelu", "dtype": "float32"},
)


def synthetic_metric(i: int, rng: np.random.Generator) -> tuple[str, dict[str, Any]]:
    """A well-formed execution metric (device class, record) for the metric-path test."""
    device_class = METRIC_CLASSES[i % len(METRIC_CLASSES)]
    now = int(time.time() * 1000)
    return device_class, {
        "workload_id": f"m{i}", "device_id": f"{device_class}-0", "device_class": device_class,
        "runtime": device_class.split("-")[0], "op": METRIC_OPS[i % len(METRIC_OPS)],
        "variant": {"precision": "fp32", "mode": "eager"}, "flops": 4.2e6, "bytes_moved": 2e5,
        "status": "ok", "queue_ms": 0.5, "exec_ms": float(rng.lognormal(0.0, 0.3)),
        "started_at_ms": now, "finished_at_ms": now, "energy_j": None}


def metric_records(count: int, rows_per_record: int,
                   form: str = "objects") -> list[tuple[str, bytes, int]]:
    """``count`` metrics as (device class, wire value, rows) records of up to
    ``rows_per_record`` rows of one class each (an executor's batch form, version 2 row
    objects or version 3 ``"columns"``; 1: a record each)."""
    encode = metric_columns_bytes if form == "columns" else metric_batch_bytes
    rng = np.random.default_rng(0)
    by_class: dict[str, list[bytes]] = {}
    for i in range(count):
        device_class, record = synthetic_metric(i, rng)
        by_class.setdefault(device_class, []).append(json.dumps(record).encode())
    return [(device_class, encode(rows[i:i + rows_per_record]),
             len(rows[i:i + rows_per_record]))
            for device_class, rows in by_class.items()
            for i in range(0, len(rows), rows_per_record)]


async def produce_metrics(metrics_topic: str, records: list[tuple[str, bytes, int]]) -> float:
    """Create the topic and produce the records; returns the produce rate (rows per s)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=BROKER)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(metrics_topic, METRIC_PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=BROKER, linger_ms=20, acks=1,
                                max_request_size=4 * 1024 * 1024)
    await producer.start()
    started = time.monotonic()
    try:
        for device_class, value, _ in records:
            await producer.send(metrics_topic, value, key=f"{device_class}-0".encode(),
                                partition=class_partition(device_class, METRIC_PARTITIONS))
        await producer.flush()
    finally:
        await producer.stop()
    return sum(rows for _, _, rows in records) / (time.monotonic() - started)


async def committed(group: str, metrics_topic: str) -> int:
    """Total offset the group has committed on the metrics topic."""
    admin = AIOKafkaAdminClient(bootstrap_servers=BROKER)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(meta.offset for tp, meta in offsets.items()
               if tp.topic == metrics_topic and meta.offset >= 0)


async def raw_consumer_rate(metrics_topic: str, records: int) -> float:
    """Rows/s of a bare aiokafka consumer (getmany + json.loads, rows counted, not rebuilt:
    app.records.metric_count) reading the topic's ``records`` records."""
    consumer = AIOKafkaConsumer(bootstrap_servers=BROKER, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(metrics_topic, p) for p in range(METRIC_PARTITIONS)])
        await consumer.seek_to_beginning()
        seen, rows, started = 0, 0, time.monotonic()
        while seen < records:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for messages in batch.values():
                for message in messages:
                    rows += metric_count(json.loads(message.value))
                    seen += 1
        return rows / (time.monotonic() - started)
    finally:
        await consumer.stop()


def metric_path(count: int, rows_per_record: int, form: str = "objects") -> dict[str, Any]:
    """Window + learn throughput of one worker against the raw consumer, same topic, in rows
    (executions) per second, with ``rows_per_record`` rows in each metrics record of ``form``
    (`METRIC_FORMS`)."""
    local = LocalCluster.isolated(WORKDIR / uuid.uuid4().hex[:8], broker=BROKER)
    metrics_topic = topic(local.namespace, "metrics")
    records = metric_records(count, rows_per_record, form)
    rows_each = count / len(records)  # the committed offsets count records
    produce_rate = asyncio.run(produce_metrics(metrics_topic, records))
    worker = local.start_worker()
    samples: list[tuple[float, int]] = []
    try:
        local.wait_ready(worker, 240)
        cpu_before = cpu_seconds({"worker": [worker.popen.pid]})["worker"]
        deadline = time.monotonic() + max(120.0, count / 200.0)
        while time.monotonic() < deadline:
            done = asyncio.run(committed(local.app_id, metrics_topic))
            samples.append((time.monotonic(), done))
            if done >= len(records):
                break
            time.sleep(0.2)
        worker_cpu_s = cpu_seconds({"worker": [worker.popen.pid]})["worker"] - cpu_before
        steps = stage_cpu(local.api_text("/metrics"))
        # The global models table (what /api/models serves) trails the class tables the
        # learn stage writes: wait, up to 30 s, for it to count every row.
        settle = time.monotonic() + 30.0
        while True:
            models = local.api("/api/models")
            if learned_rows(models) >= count or time.monotonic() > settle:
                break
            time.sleep(0.5)
        local.stop()
        raw = asyncio.run(raw_consumer_rate(metrics_topic, len(records)))
    finally:
        stop_and_delete_topics(local)
    record_rate = slope(samples, 0.1 * len(records), 0.9 * len(records))
    rate = record_rate * rows_each if record_rate else None
    learned = learned_rows(models)
    return {"metrics": count, "rows_per_record": rows_per_record, "form": form,
            "records": len(records), "broker": BROKER,
            # The CPUs this process (and so the worker it starts) may run on.
            "cpus": sorted(os.sched_getaffinity(0)),
            "produce_rate_per_s": produce_rate, "worker_rate_per_s": rate,
            "worker_records_per_s": record_rate, "raw_consumer_rate_per_s": raw,
            "ratio_worker_to_raw": rate / raw if rate and raw else None,
            "committed": samples[-1][1] if samples else 0, "learned_samples": learned,
            # CPU time per row: the worker process's from ready to the last commit (Faust and
            # the consumer included), and the metric stage's own steps (their counters).
            "worker_cpu_us_per_row": 1e6 * worker_cpu_s / count,
            "step_cpu_us_per_row": {step: 1e6 * seconds / count
                                    for step, seconds in steps.items()},
            "offsets_over_time": [(t - samples[0][0], n * rows_each) for t, n in samples]}


def learned_rows(models: Any) -> int:
    """The samples of every class's model in an /api/models answer."""
    listed = models.get("models", []) if isinstance(models, dict) else models
    return sum(int(m.get("samples", 0)) for m in listed if isinstance(m, dict))


def stage_cpu(exposition: str) -> dict[str, float]:
    """The metric stage's CPU seconds per step from a /metrics exposition."""
    out = {}
    for line in exposition.splitlines():
        if line.startswith("switchyard_metric_stage_cpu_seconds_total{"):
            step = line.split('step="', 1)[1].split('"', 1)[0]
            out[step] = float(line.rsplit(" ", 1)[1])
    return out


def slope(samples: list[tuple[float, int]], low: float, high: float) -> float | None:
    """Events/s between the first samples at or past ``low`` and ``high`` committed."""
    start = next(((t, n) for t, n in samples if n >= low), None)
    end = next(((t, n) for t, n in samples if n >= high), None)
    if start is None or end is None or end[0] <= start[0]:
        return None
    return (end[1] - start[1]) / (end[0] - start[0])


def process_roles(cluster: Any) -> dict[str, list[int]]:
    """PIDs of the cluster's worker, its executors, the broker and this load generator."""
    import psutil

    roles: dict[str, list[int]] = {"worker": [], "executors": [], "broker": [],
                                   "load generator": [os.getpid()]}
    for proc in cluster.local.procs:
        roles["worker" if proc.name.startswith("worker") else "executors"].append(proc.popen.pid)
    for candidate in psutil.process_iter(["cmdline"]):
        if "kafka.Kafka" in (candidate.info.get("cmdline") or []):
            roles["broker"].append(candidate.pid)
    return roles


def cpu_seconds(roles: dict[str, list[int]]) -> dict[str, float]:
    """User + system CPU seconds used so far, summed per role."""
    import psutil

    out = {}
    for role, pids in roles.items():
        total = 0.0
        for pid in pids:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        out[role] = total
    return out


def decide_path(rates: list[float], seconds: float) -> dict[str, Any]:
    """Decision latency and Kafka overhead at each offered load, on one worker."""
    fleet = [ExecutorSpec("sim", "h100", 2, threads=None), ExecutorSpec("sim", "l4", 2,
                                                                        threads=None)]
    cluster = start_cluster(WORKDIR, fleet, {"SWITCHYARD_POLICY": "switchyard"})
    out: dict[str, Any] = {"fleet": [s.label() for s in fleet], "loads": {}}
    roles = process_roles(cluster)
    try:
        warm = synthetic_trace(40, seed=1, id_prefix="warm-")  # route topics exist after this
        run_trace(cluster.namespace, warm, np.cumsum(poisson_gaps(40, 20.0)), 30.0)
        for rate in rates:
            count = max(20, int(rate * seconds))
            trace = synthetic_trace(count, seed=int(rate), id_prefix=f"r{rate:g}-")
            cpu_before = cpu_seconds(roles)
            run = run_trace(cluster.namespace, trace, np.cumsum(poisson_gaps(count, rate)), 30.0,
                            watch_routes=True)
            cpu_after = cpu_seconds(roles)
            latency = [run.route_ts[w] - run.workload_ts[w] for w in run.route_ts
                       if w in run.workload_ts]
            routed = sorted(run.route_ts.values())
            ok = {w: r for w, r in run.results.items() if r.get("status") == "ok"}
            overhead = [run.completion_ms(w) - float(r["queue_ms"]) - float(r["latency_ms"])
                        for w, r in ok.items()]
            out["loads"][f"{rate:g}"] = {
                "offered_per_s": rate, "workloads": count, "routed": len(routed),
                "results": len(run.results),
                "decisions_per_s": (len(routed) - 1) / ((routed[-1] - routed[0]) / 1e3)
                if len(routed) > 1 and routed[-1] > routed[0] else None,
                "decision_latency_ms": summarize(latency),
                "completion_ms": summarize(run.completion_ms(w) for w in run.results),
                "execution_ms": summarize(float(r["latency_ms"]) for r in ok.values()),
                "queue_ms": summarize(float(r["queue_ms"]) for r in ok.values()),
                "kafka_overhead_ms": summarize(overhead),
                "cpu_ms_per_workload": {role: 1000.0 * (cpu_after[role] - cpu_before[role])
                                        / count for role in roles}}
            load = out["loads"][f"{rate:g}"]
            print(f"[pipeline] offered {rate:g}/s: decisions {fmt(load['decisions_per_s'])}/s, "
                  f"decision p50 {fmt(load['decision_latency_ms']['p50'])} ms p99 "
                  f"{fmt(load['decision_latency_ms']['p99'])} ms, overhead p50 "
                  f"{fmt(load['kafka_overhead_ms']['p50'])} ms, worker CPU "
                  f"{fmt(load['cpu_ms_per_workload']['worker'])} ms/workload", flush=True)
    finally:
        cluster.stop()
    for key, processes in (("floor", False), ("floor_processes", True)):
        floor = kafka_floor(FLOOR_RATE_PER_S, seconds, processes=processes)
        out[key] = floor
        print(f"[pipeline] the same four hops over raw aiokafka at {FLOOR_RATE_PER_S:g}/s, "
              f"{'a process per relay' if processes else 'relays in one process'}: p50 "
              f"{fmt(floor['round_trip_ms']['p50'])} ms, p99 "
              f"{fmt(floor['round_trip_ms']['p99'])} ms", flush=True)
    return out


def floor_sentence(decide: dict[str, Any]) -> str:
    """The round trip's floors (bench/kafka_floor.py: the relays in one process, and each in a
    process of its own) and the round trip at their rate over them."""
    floor = decide.get("floor")
    if not floor:
        return ""
    load = decide["loads"].get(f"{floor['rate_per_s']:g}")
    ours = load["kafka_overhead_ms"] if load else None

    def over(trip: dict[str, Any]) -> str:
        if not ours or not trip["p50"] or not trip["p99"]:
            return ""
        return (f"{fmt(ours['p50'] / trip['p50'], '.2f')}× that at p50 and "
                f"{fmt(ours['p99'] / trip['p99'], '.2f')}× at p99")

    trip = floor["round_trip_ms"]
    apart = decide.get("floor_processes")
    text = (f"**The round trip's floor**: the same four hops (workload → worker → executor → "
            f"worker → client) with nothing but aiokafka in between (three relays that consume a "
            f"topic and produce each record to the next, acks=all, no linger; "
            f"`bench/kafka_floor.py`), {floor['received']}/{floor['sent']} records at "
            f"{floor['rate_per_s']:g}/s: p50 {fmt(trip['p50'])} ms, p99 {fmt(trip['p99'])} ms "
            f"with the relays in the client's process")
    if apart:
        at = apart["round_trip_ms"]
        text += (f"; {apart['received']}/{apart['sent']} records, p50 {fmt(at['p50'])} ms, p99 "
                 f"{fmt(at['p99'])} ms with each relay in a process of its own, as the worker "
                 f"and the executors are")
    over_first, over_apart = over(trip), over(apart["round_trip_ms"]) if apart else ""
    if over_first:
        text += f". Switchyard's round trip at that rate is {over_first}"
        if over_apart:
            text += f" of the first; {over_apart} of the second"
    text += "."
    floors = [t["p50"] for t in [trip] + ([apart["round_trip_ms"]] if apart else []) if t["p50"]]
    if floors and min(floors) >= 5.0:
        text += (" Issue 12's round-trip goal (p50 ≤ 5 ms) is at or below this floor on this "
                 "machine: it would leave Switchyard's own work no time at all.")
    elif floors and max(floors) >= 5.0:
        text += (" Issue 12's round-trip goal (p50 ≤ 5 ms) is at or below the floor with a "
                 "process per hop on this machine, the way Switchyard runs.")
    return text


def plot(results: dict[str, Any], out_dir: Path) -> Path:
    """Committed metric offsets over time; decision latency against offered load."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for form in results["metric_path"]:
        points = form["offsets_over_time"]
        ax1.plot([t for t, _ in points], [n for _, n in points], marker=".",
                 label=f"{FORM_NAMES[form.get('form', 'objects')]}, "
                       f"{form['rows_per_record']} row(s)/record: worker "
                       f"{fmt(form['worker_rate_per_s'], '.0f')}/s, raw "
                       f"{fmt(form['raw_consumer_rate_per_s'], '.0f')}/s")
    ax1.set_xlabel("s since the first sample")
    ax1.set_ylabel("metric rows committed (window + learn)")
    ax1.set_title("metric path, rows per second")
    ax1.legend(fontsize=7)
    # By offered load: a JSON round trip (a rerun of the metric part alone) sorts the keys
    # as strings.
    loads = sorted(results["decide_path"]["loads"].values(), key=lambda v: v["offered_per_s"])
    offered = [v["offered_per_s"] for v in loads]
    for stat in ("p50", "p99"):
        ax2.plot(offered, [v["decision_latency_ms"][stat] for v in loads], marker="o",
                 label=f"decision {stat}")
        ax2.plot(offered, [v["kafka_overhead_ms"][stat] for v in loads], marker="s",
                 linestyle="--", label=f"Kafka round trip {stat}")
    ax2.set_xlabel("offered workloads/s")
    ax2.set_ylabel("ms")
    ax2.set_yscale("log")
    ax2.legend(fontsize=8)
    return save_figure(fig, out_dir, "pipeline")


def report(results: dict[str, Any], quick: bool) -> str:
    """The BENCHMARKS.md section."""
    command = "switchyard bench pipeline" + (" --quick" if quick else "")
    forms = results["metric_path"]
    parts = [section_header("Pipeline throughput and latency", command, results["machine"],
                            quick)]
    parts.append(
        f"**Metric path.** {', '.join(str(m['metrics']) for m in forms[:-1])}"
        f"{' and ' if len(forms) > 1 else ''}{forms[-1]['metrics']} synthetic "
        f"metrics ({len(METRIC_CLASSES)} classes, {METRIC_PARTITIONS} partitions) waiting in the "
        "topic when a fresh worker starts, as one record per execution and in the metrics "
        "topic's two batch forms, row objects (version 2) and column-wise (version 3, what "
        "executors publish; docs/contract.md: rows of one class per record, as an executor "
        "publishes what it ran within its linger). The worker's rate is the slope of its "
        "consumer group's committed offsets from 10 % to 90 % (both the window and the learn "
        "stage have processed what is committed), in rows (executions) per second; the raw "
        "rate is one aiokafka consumer (`getmany` + `json.loads`, rows counted) reading the "
        "same topic afterwards. CPU µs per row: the worker process's (Faust and its consumer "
        "included), and the metric stage's steps (parse, window, learn; tables: the window "
        "and model table writes) from its counters at /metrics. Rows learned: the samples of "
        "the global models table (what deciders read), read once it counts every row or 30 s "
        "after the last offset was committed (it trails the class tables the stage writes)."
        + (f" The worker and the raw consumer ran on CPU {forms[0]['cpus']} (taskset) against "
           f"the broker at {forms[0]['broker']}; other work on the machine may have shared "
           "it, so compare the ratios of one run." if forms[0].get("cpus") else "")
        + (f" Measured {forms[0]['measured_at']}." if forms[0].get("measured_at") else "")
        + " Rerun alone with `SWITCHYARD_BENCH_PARTS=metric switchyard bench pipeline` (the "
        "other parts' figures are kept; the parts are metric, decide, worker, executor and "
        "sustained).")
    by_form = {m.get("form"): m for m in forms}
    if "columns" in by_form and "objects" in by_form:
        columnar, objects = by_form["columns"], by_form["objects"]
        if columnar.get("worker_rate_per_s") and objects.get("raw_consumer_rate_per_s"):
            parts.append(
                "The columnar form makes the raw consumer faster too (it decodes a sixth of the "
                "bytes): against the raw consumer of the row-object form, in the same run, the "
                "worker on columnar records does "
                f"{columnar['worker_rate_per_s'] / objects['raw_consumer_rate_per_s']:.3f}× "
                f"({fmt(columnar['worker_rate_per_s'], '.0f')} ÷ "
                f"{fmt(objects['raw_consumer_rate_per_s'], '.0f')} rows/s).")
    parts.append(markdown_table(
        ["form", "rows / record", "worker (window + learn)", "raw aiokafka consumer",
         "worker ÷ raw", "worker records /s", "producer", "rows learned",
         "worker CPU µs/row", "parse / window / learn / tables µs/row"],
        [[FORM_NAMES[m.get("form", "objects" if m["rows_per_record"] > 1 else "row")],
          f"{m['rows_per_record']}", fmt(m["worker_rate_per_s"], ".0f") + " rows/s",
          fmt(m["raw_consumer_rate_per_s"], ".0f") + " rows/s",
          fmt(m["ratio_worker_to_raw"], ".3f"), fmt(m["worker_records_per_s"], ".0f"),
          fmt(m["produce_rate_per_s"], ".0f") + " rows/s", fmt(m["learned_samples"], "d"),
          fmt(m.get("worker_cpu_us_per_row"), ".1f"),
          " / ".join(fmt(m.get("step_cpu_us_per_row", {}).get(step), ".2f")
                     for step in ("parse", "window", "learn", "tables"))]
         for m in forms]))
    d = results["decide_path"]
    parts.append(
        f"**Decide path.** One worker (policy switchyard), fleet {', '.join(d['fleet'])} "
        "(simulated, microsecond executions), Poisson arrivals at each offered load. Decision "
        "latency = route record timestamp − workload record timestamp (Kafka CreateTime). Kafka "
        "round trip = completion (produced → result received) − executor queue − execution. "
        "CPU ms per workload = CPU time (user + system) a process used during the load, over "
        "the load's workloads; every process shares this machine's 2 cores, so the sum of the "
        "last four columns is what one workload costs the machine."
        + (f" Measured {d['measured_at']}." if d.get("measured_at") else ""))
    rows = []
    for load in sorted(d["loads"].values(), key=lambda entry: entry["offered_per_s"]):
        dl, ko = load["decision_latency_ms"], load["kafka_overhead_ms"]
        rows.append([f"{load['offered_per_s']:g}", fmt(load["decisions_per_s"]),
                     fmt(dl["p50"]), fmt(dl["p99"]), fmt(ko["p50"]), fmt(ko["p99"]),
                     fmt(load["completion_ms"]["p50"]), fmt(load["execution_ms"]["p50"], ".3f"),
                     f"{load['results']}/{load['workloads']}",
                     *(fmt(load.get("cpu_ms_per_workload", {}).get(role)) for role in CPU_ROLES)])
    parts.append(markdown_table(
        ["offered /s", "decisions /s", "decision p50 ms", "decision p99 ms",
         "Kafka round trip p50 ms", "p99 ms", "completion p50 ms", "execution p50 ms",
         "results", *(f"CPU ms/wl: {role}" for role in CPU_ROLES)], rows))
    floor_text = floor_sentence(d)
    if floor_text:
        parts.append(floor_text)
    if results.get("worker_capacity"):
        from bench.hotpath import report_capacity

        parts.append(report_capacity(results["worker_capacity"]))
    if results.get("executor_capacity"):
        from bench.executor_capacity import report_executor_capacity

        parts.append(report_executor_capacity(results["executor_capacity"]))
    if results.get("sustained"):
        parts.append(report_sustained(results["sustained"]))
    parts.append("![pipeline](bench/out/pipeline.png)")
    return "\n\n".join(parts)


def run(quick: bool, out_dir: Path) -> int:
    """Entry point."""
    info = machine()
    count, rates, seconds = (20_000, [10.0, 40.0, 80.0], 10.0) if quick else (
        100_000, [10.0, 25.0, 50.0, 100.0, 200.0, 400.0], 30.0)
    # SWITCHYARD_BENCH_PARTS=metric (or decide) re-runs one part of the full mode and keeps the
    # other's figures from the last run.
    parts = [p for p in os.environ.get("SWITCHYARD_BENCH_PARTS", "").split(",") if p]
    previous = out_dir / "pipeline.json"
    results: dict[str, Any] = {"machine": info, "quick": quick}
    if parts and previous.exists():
        results = {**json.loads(previous.read_text()), "machine": info, "quick": quick}
    if not parts or "metric" in parts:
        metric = []
        for rows_per_record, form_name, multiple in METRIC_FORMS:
            form = metric_path(count * multiple, rows_per_record, form_name)
            form["measured_at"] = now_utc()
            metric.append(form)
            print(f"[pipeline] metric path, {FORM_NAMES[form_name]}, {rows_per_record} "
                  f"row(s)/record: worker "
                  f"{fmt(form['worker_rate_per_s'], '.0f')} rows/s, raw "
                  f"{fmt(form['raw_consumer_rate_per_s'], '.0f')} rows/s", flush=True)
        results["metric_path"] = metric
    if not parts or "decide" in parts:
        results["decide_path"] = decide_path(rates, seconds)
        results["decide_path"]["measured_at"] = now_utc()
    if not parts or "worker" in parts:
        from bench.hotpath import worker_capacity

        capacity = worker_capacity(3_000 if quick else 20_000, WORKDIR)
        capacity["measured_at"] = now_utc()
        results["worker_capacity"] = capacity
        print(f"[pipeline] worker capacity: {fmt(capacity['rate_per_s'], '.0f')} workloads/s, "
              f"{fmt(capacity['worker_cpu_us_per_workload'], '.0f')} CPU µs each", flush=True)
    if not parts or "executor" in parts:
        from bench.executor_capacity import executor_capacity

        routes = executor_capacity(5_000 if quick else 20_000, WORKDIR)
        routes["measured_at"] = now_utc()
        results["executor_capacity"] = routes
        print(f"[pipeline] executor capacity: {fmt(routes['rate_per_s'], '.0f')} routes/s, "
              f"{fmt(routes['cpu_us_per_route'], '.0f')} CPU µs each", flush=True)
    if not parts or "sustained" in parts:
        steady = sustained(SUSTAINED_RATE_PER_S, 15.0 if quick else 60.0)
        steady["measured_at"] = now_utc()
        results["sustained"] = steady
    write_json(out_dir, "pipeline", results)
    plot(results, out_dir)
    update_benchmarks_md("pipeline", report(results, quick))
    return 0
