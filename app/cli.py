"""The ``switchyard`` command line.

Each subcommand imports what it needs when it runs, so ``switchyard kafka status`` does not
pay for loading torch and JAX.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app import kafka_local
from bench import BENCHMARK_NAMES

RUNTIMES = ("torch", "jax", "numpy", "sim")


def runtime_list(text: str) -> str:
    """``--runtime`` of the executor: one runtime, or several comma-separated (each once)."""
    names = text.split(",")
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: one of {', '.join(RUNTIMES)}, or several of them comma-separated, "
            "each once")
    return text


def _kafka(ns: argparse.Namespace) -> int:
    data_dir = Path(ns.data_dir)
    if ns.action == "start":
        return kafka_local.main_guard(kafka_local.start, ns.port, data_dir, secure=ns.secure)
    if ns.action == "stop":
        return kafka_local.main_guard(kafka_local.stop, data_dir, false_ok=True)
    return kafka_local.main_guard(kafka_local.status, data_dir)


def _worker(ns: argparse.Namespace) -> int:
    import os

    if ns.web_port is not None:
        os.environ["SWITCHYARD_WEB_PORT"] = str(ns.web_port)
    from app.loop import choose_event_loop

    choose_event_loop()  # before Faust is imported
    from app.main import main as faust_main  # reads the settings from the environment

    level = {"warning": "warn", "critical": "crit"}.get(ns.loglevel, ns.loglevel)
    argv = ["switchyard", "worker", "-l", level]
    if ns.web_port is not None:
        argv += ["--web-port", str(ns.web_port)]
    sys.argv = argv
    faust_main()
    return 0


def _executor(ns: argparse.Namespace) -> int:
    from app.executor_main import run_executor

    return run_executor(
        runtime=ns.runtime, device=ns.device, threads=ns.threads, device_id=ns.id,
        slowdown_file=ns.slowdown_file, drift=ns.drift, cpus=ns.cpus,
        link_rtt_ms=ns.link_rtt_ms, link_bandwidth_mbit_s=ns.link_bandwidth_mbit_s,
        price_per_hour=ns.price_per_hour, power_model=ns.power_model, instances=ns.instances,
    )


def _submit(ns: argparse.Namespace) -> int:
    from app.submit import run_submit

    return run_submit(trace=Path(ns.trace), rate=ns.rate, wait=ns.wait, timeout_s=ns.timeout,
                      limit=ns.limit, id_prefix=ns.id_prefix)


def _profile(ns: argparse.Namespace) -> int:
    from app.profile import run_profile

    return run_profile(runtime=ns.runtime, device=ns.device, trace_path=Path(ns.trace),
                       threads=ns.threads, repeats=ns.repeats, cpus=ns.cpus)


def _demo(ns: argparse.Namespace) -> int:
    from app.demo import run_demo

    return run_demo(sim=ns.sim, workloads=ns.workloads, rate=ns.rate, keep_running=not ns.once)


def _bench(ns: argparse.Namespace) -> int:
    from bench import run_benchmark

    return run_benchmark(ns.name, quick=ns.quick, out_dir=Path(ns.out))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (also used to check the README's help)."""
    parser = argparse.ArgumentParser(
        prog="switchyard",
        description="Route tensor workloads to the device and variant that finish them best, "
                    "learning from a Kafka stream of measurements.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    kafka = sub.add_parser("kafka", help="a local single-node Apache Kafka (KRaft) on 127.0.0.1",
                           description="Start, stop or query a local Apache Kafka broker whose "
                                       "jars are fetched once with Maven.")
    kafka.add_argument("action", choices=("start", "stop", "status"),
                       help="start (idempotent), stop (only the broker it started), or status "
                            "(exit 1 when not running)")
    kafka.add_argument("--port", type=int, default=9092, help="client port (default 9092; the "
                       "KRaft controller listens on port+1)")
    kafka.add_argument("--data-dir", default=str(kafka_local.DEFAULT_DATA_DIR),
                       help="configuration, logs and data (default %(default)s)")
    kafka.add_argument("--secure", action="store_true",
                       help="start: also listen with SASL_PLAINTEXT (port+2), SSL (port+3) and "
                            "SASL_SSL (port+4); a private CA, a client password and one "
                            "SWITCHYARD_* env file per listener go under DATA_DIR/secure/")
    kafka.set_defaults(func=_kafka)

    worker = sub.add_parser("worker", help="the Faust worker: registry, window, learn, decide, web",
                            description="Run the Faust worker (settings from SWITCHYARD_* "
                                        "environment variables).")
    worker.add_argument("-l", "--loglevel", default="info",
                        choices=("debug", "info", "warning", "warn", "error", "critical", "crit"),
                        help="log level (default info)")
    worker.add_argument("--web-port", type=int, default=None,
                        help="web view port (default: SWITCHYARD_WEB_PORT, else 6066)")
    worker.set_defaults(func=_worker)

    executor = sub.add_parser("executor", help="an executor process holding one runtime on one device",
                              description="Consume the device class's routes, run each op, and "
                                          "publish metrics, outcomes and heartbeats.")
    executor.add_argument("--runtime", required=True, type=runtime_list,
                          help="torch (CPU, CUDA), jax (whatever jax.devices() offers), numpy "
                               "(CPU reference), or sim (a simulated device from the catalog); "
                               "several comma-separated (torch,jax,numpy): one executor each "
                               "in this process, on one device, running their work one at a "
                               "time in arrival order (one queue, which the router counts as "
                               "one)")
    executor.add_argument("--device", default="cpu", help="cpu, cuda:N, tpu:N, or a sim model "
                          "(h100, h200, a100, l4, tpu-v5e, jetson-orin, jetson-nano, cpu-core) for "
                          "--runtime sim")
    executor.add_argument("--threads", type=int, default=None, help="intra-op threads, and as "
                          "many cores, enforced by CPU affinity (the least busy ones unless "
                          "--cpus names them)")
    executor.add_argument("--cpus", default=None, help="cores to pin to, e.g. 2 or 0-3 or 0,2 "
                          "(default: --threads N takes the N least busy; neither: unpinned)")
    executor.add_argument("--id", default=None, help="device id (default: host-runtime-device-pid)")
    executor.add_argument("--slowdown-file", default=None, help="file holding a slowdown factor, "
                          "re-read before each op (drift experiments)")
    executor.add_argument("--drift", default=None, help="sim only: 'seconds:factor,...' schedule")
    executor.add_argument("--link-rtt-ms", type=float, default=None,
                          help="a remote class: the round trip of the link it sits behind (ms; "
                               "with --link-bandwidth-mbit-s). Each workload really waits the "
                               "link's time for its bytes, reported as transfer_ms")
    executor.add_argument("--link-bandwidth-mbit-s", type=float, default=None,
                          help="the link's bandwidth in Mbit/s (> 0)")
    executor.add_argument("--price-per-hour", type=float, default=None,
                          help="price per device-hour, for the cost objective (default: unpriced)")
    executor.add_argument("--power-model", default=None,
                          help="a catalog device (e.g. cpu-core) whose published idle and peak "
                               "power model the energy no counter measures (flagged "
                               "energy_simulated); sim devices always use their own")
    executor.add_argument("--instances", type=int, default=1,
                          help="sim only: this many simulated devices of the model in this one "
                               "process, each its own device id (<id>-0, <id>-1, ...), consumer "
                               "and producer: a large simulated fleet without a process each")
    executor.set_defaults(func=_executor)

    submit = sub.add_parser("submit", help="publish workloads from a JSONL trace",
                            description="Publish a trace's workloads to switchyard.workloads.")
    submit.add_argument("--trace", required=True, help="JSONL file, one workload per line")
    submit.add_argument("--rate", type=float, default=None, help="workloads per second (default: "
                        "as fast as possible)")
    submit.add_argument("--wait", action="store_true", help="wait for every result and print a summary")
    submit.add_argument("--timeout", type=float, default=600.0,
                        help="seconds to wait for results (default 600)")
    submit.add_argument("--limit", type=int, default=None, help="only the first N workloads")
    submit.add_argument("--id-prefix", default=None, help="prefix workload ids (resubmit a trace "
                        "as new work)")
    submit.set_defaults(func=_submit)

    profile = sub.add_parser("profile", help="run a trace's ops on one runtime, without Kafka",
                             description="Time every op of a trace in every variant one runtime "
                                         "supports, and print a table.")
    profile.add_argument("--runtime", required=True, choices=RUNTIMES, help="the runtime to time")
    profile.add_argument("--device", default="cpu", help="cpu, cuda:N, tpu:N or a sim model "
                         "(default cpu)")
    profile.add_argument("--trace", required=True, help="JSONL file of workloads")
    profile.add_argument("--threads", type=int, default=None, help="intra-op threads, and as "
                         "many cores (CPU affinity)")
    profile.add_argument("--cpus", default=None, help="cores to pin to, e.g. 2 or 0-3")
    profile.add_argument("--repeats", type=int, default=5, help="timed runs per op and variant "
                         "(default 5)")
    profile.set_defaults(func=_profile)

    demo = sub.add_parser(
        "demo", help="broker, worker, executors and a synthetic load",
        description="Start a local broker if none answers, a worker, one CPU executor per "
                    "runtime (torch, jax, numpy; CUDA when present), send a synthetic load with a "
                    "progress bar and print the dashboard address; without --once it keeps "
                    "sending until Ctrl-C, which stops everything it started.")
    demo.add_argument("--sim", action="store_true", help="add sim-h100, sim-l4, sim-cpu-core")
    demo.add_argument("--workloads", type=int, default=600,
                      help="synthetic workloads to send (default 600)")
    demo.add_argument("--rate", type=float, default=20.0,
                      help="workloads per second (default 20)")
    demo.add_argument("--once", action="store_true", help="stop after the load is done")
    demo.set_defaults(func=_demo)

    bench = sub.add_parser("bench", help="benchmarks: JSON and PNG under bench/out/",
                           description="Run one benchmark and update BENCHMARKS.md.")
    bench.add_argument("name", choices=BENCHMARK_NAMES,
                       help="scheduling (policies vs an oracle), costmodel (accuracy), pipeline "
                            "(throughput), drift (adaptation), batching (dynamic batching in an "
                            "executor), offload (local fleet vs a remote class behind a link), "
                            "fleetsim (large simulated fleets), layers (real model layers: "
                            "placement against a one-core profile, idle probes off and on)")
    bench.add_argument("--quick", action="store_true", help="a short run (under 5 minutes)")
    bench.add_argument("--out", default="bench/out", help="output folder")
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``switchyard`` console script."""
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
