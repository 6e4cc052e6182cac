"""A local single-node Apache Kafka (KRaft) for development, tests and CI.

The broker's jars come from Maven Central through the pinned pom in ``docker/kafka/`` and are
cached outside the repository, so a second start needs no network. ``start`` is idempotent,
``stop`` only stops the broker this module started (its pid file), and readiness means a real
metadata request succeeded.

``start(secure=True)`` adds SASL and TLS listeners next to the PLAINTEXT one (``app.kafka_secure``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app import kafka_secure
from app.kafka_config import (
    BrokerPaths,
    KafkaError,
    broker_ready,
    server_properties,
    write_private,
)

logger = logging.getLogger(__name__)
__all__ = ["BrokerPaths", "KafkaError", "broker_ready", "server_properties", "write_private",
           "read_pid", "start", "status", "stop", "wait_ready"]

REPO_ROOT = Path(__file__).resolve().parents[1]
POM = REPO_ROOT / "docker" / "kafka" / "pom.xml"
DEFAULT_DATA_DIR = Path(os.environ.get("SWITCHYARD_KAFKA_DATA_DIR", "~/.cache/switchyard/kafka-data"))
CACHE_DIR = Path(os.environ.get("SWITCHYARD_KAFKA_CACHE", "~/.cache/switchyard/kafka")).expanduser()
# About 512 MiB: enough for a test broker, small beside a worker and executors on 2 cores.
HEAP = "-Xmx512m -Xms256m"
READY_TIMEOUT_S = 90.0

COMPOSE_HINT = (
    "Or run the broker in a container instead: `docker compose -f docker/compose.yaml up kafka`."
)


def kafka_version() -> str:
    """The Kafka version pinned in the pom."""
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    if not match:
        raise KafkaError(f"no <kafka.version> in {POM}")
    return match.group(1)


LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


def _require_tools() -> tuple[str, str]:
    java = shutil.which("java")
    mvn = shutil.which("mvn")
    missing = []
    if java is None:
        missing.append("a Java runtime (JDK 17 or newer, e.g. `apt-get install openjdk-17-jdk-headless`)")
    if mvn is None and not _jars_present():
        missing.append("Maven (`apt-get install maven`), used once to fetch the Kafka jars")
    if missing:
        raise KafkaError("To run a local Kafka broker, install " + " and ".join(missing) + ". " + COMPOSE_HINT)
    assert java is not None
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)', out)
    if match and int(match.group(1)) < 17:
        raise KafkaError(f"Kafka {kafka_version()} needs Java 17 or newer; found: {out.splitlines()[0]}. {COMPOSE_HINT}")
    return java, mvn or ""


def libs_dir() -> Path:
    """The cached jar folder of the pinned Kafka version."""
    return CACHE_DIR / f"kafka-{kafka_version()}" / "libs"


def _jars_present() -> bool:
    libs = libs_dir()
    return libs.is_dir() and any(libs.glob("kafka_2.13-*.jar"))


def fetch_jars(mvn: str) -> Path:
    """Fetch the pinned Kafka jars with Maven into the cache (once)."""
    libs = libs_dir()
    if _jars_present():
        return libs
    print(f"fetching Apache Kafka {kafka_version()} jars with Maven into {libs} ...", flush=True)
    tmp = libs.with_name("libs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    proc = subprocess.run(
        [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise KafkaError(f"Maven could not fetch the Kafka jars:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    tmp.rename(libs)
    return libs


def _classpath() -> str:
    return str(libs_dir()) + "/*"


def _java_cmd(java: str, paths: BrokerPaths, main_class: str, *args: str) -> list[str]:
    return [
        java, *HEAP.split(), "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={paths.log_config}",
        "-cp", _classpath(), main_class, *args,
    ]


def read_pid(paths: BrokerPaths) -> int | None:
    """The pid of the broker this data dir started, if that process still runs."""
    try:
        pid = int(paths.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    # A broker that this very process started and that has exited stays a zombie until it is
    # reaped, and a zombie passes the checks here: stop() then waited 30 s and "killed" it.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None
    # A recycled pid would belong to something else: check it is our java.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        # Empty while the java launcher re-executes itself at start: still ours.
        if cmdline and b"kafka.Kafka" not in cmdline:
            return None
    except OSError:
        pass
    return pid


def wait_ready(bootstrap: str, timeout_s: float = READY_TIMEOUT_S,
               process: subprocess.Popen[bytes] | None = None,
               paths: BrokerPaths | None = None) -> float:
    """Wait until the broker answers metadata requests; return the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if broker_ready(bootstrap, 2.0):
            return time.monotonic() - started
        if process is not None and paths is not None and process.poll() is not None:
            tail = paths.log_file.read_text()[-3000:] if paths.log_file.exists() else ""
            paths.pid_file.unlink(missing_ok=True)
            raise KafkaError(f"the broker exited during start; see {paths.log_file}\n{tail}")
        time.sleep(0.3)
    raise KafkaError(f"the broker did not answer at {bootstrap} within {timeout_s:.0f} s")


# Partitions kept from earlier runs beyond which `start` and `status` say so: every benchmark
# run makes a namespace of topics, and a run killed before its clean-up leaves them. On
# 2026-12-07 a dev broker holding 7,154 partition directories (723 MB) took over 90 s to
# start and read the live one-queue scheduling set at 350-1,060 ms mean completion where the
# same code on a fresh broker read 213-276.
MANY_PARTITIONS = 2000
_PARTITION_DIR = re.compile(r".+-\d+")


def partition_count(paths: BrokerPaths) -> int:
    """The partition directories in the broker's log dir (``<topic>-<n>``)."""
    if not paths.kraft.is_dir():
        return 0
    return sum(1 for d in paths.kraft.iterdir() if d.is_dir() and _PARTITION_DIR.fullmatch(d.name))


def many_partitions_note(paths: BrokerPaths) -> str | None:
    """What to tell an operator whose broker holds `MANY_PARTITIONS` or more partitions; None
    below that."""
    count = partition_count(paths)
    if count < MANY_PARTITIONS:
        return None
    return (f"note: the broker's data holds {count} partitions from earlier runs; a broker "
            "with thousands of partitions starts slowly and slows every client (benchmarks "
            "read 1.3-4x slower on one with 7,000). To start empty: switchyard kafka stop "
            f"--data-dir {paths.data_dir} && rm -rf {paths.data_dir} && switchyard kafka "
            f"start --data-dir {paths.data_dir}")


def start(port: int = 9092, data_dir: Path = DEFAULT_DATA_DIR, secure: bool = False) -> str:
    """Start the local broker if it does not run; return its (PLAINTEXT) bootstrap address.

    ``secure`` adds the SASL_PLAINTEXT, SSL and SASL_SSL listeners (port+2, +3, +4) and
    writes their client settings under ``data_dir/secure/``.
    """
    paths = BrokerPaths(data_dir.expanduser().resolve())
    bootstrap = f"127.0.0.1:{port}"
    pid = read_pid(paths)
    if pid is not None:
        running_port = paths.port_file.read_text().strip() if paths.port_file.exists() else str(port)
        print(f"Kafka already running (pid {pid}) at 127.0.0.1:{running_port}")
        if kafka_secure.configured(paths):
            kafka_secure.describe(paths, int(running_port))
        elif secure:
            raise KafkaError(f"the broker of {paths.data_dir} runs without secure listeners; "
                             f"stop it (`switchyard kafka stop --data-dir {paths.data_dir}`) "
                             "and start it again with --secure")
        return f"127.0.0.1:{running_port}"
    if broker_ready(bootstrap, 1.5):
        if secure:
            raise KafkaError(f"a Kafka broker not started by switchyard already answers at "
                             f"{bootstrap}; --secure cannot add listeners to it: choose "
                             "another --port")
        print(f"a Kafka broker already answers at {bootstrap} (not started by switchyard); using it")
        return bootstrap
    java, mvn = _require_tools()
    fetch_jars(mvn)
    paths.logs.mkdir(parents=True, exist_ok=True)
    secrets = kafka_secure.prepare(paths, port, java) if secure else None
    # Private: in secure mode it holds the keystore and SASL passwords.
    write_private(paths.config, server_properties(port, port + 1, paths) if secrets is None
                  else kafka_secure.secure_server_properties(port, port + 1, paths, secrets))
    paths.log_config.write_text(LOG4J2.format(log_file=paths.log_file))
    if not (paths.kraft / "meta.properties").exists():
        new_id = cluster_id()
        proc = subprocess.run(
            _java_cmd(java, paths, "kafka.tools.StorageTool", "format", "--cluster-id", new_id,
                      "-c", str(paths.config), "--ignore-formatted"),
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise KafkaError(f"formatting the broker's storage failed:\n{proc.stdout}{proc.stderr}")
    began = time.monotonic()
    with open(paths.logs / "stdout.log", "ab") as out:
        process = subprocess.Popen(
            _java_cmd(java, paths, "kafka.Kafka", str(paths.config)),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives the CLI; `switchyard kafka stop` ends it
        )
    paths.pid_file.write_text(str(process.pid))
    paths.port_file.write_text(str(port))
    wait_ready(bootstrap, process=process, paths=paths)
    if secrets is not None:
        kafka_secure.wait_ready(paths, port, secrets)
    print(f"Kafka {kafka_version()} started (pid {process.pid}) in {time.monotonic() - began:.1f} s; "
          f"bootstrap {bootstrap}; logs {paths.log_file}")
    note = many_partitions_note(paths)
    if note:
        print(note)
    if secrets is not None:
        kafka_secure.describe(paths, port)
    return bootstrap


def cluster_id() -> str:
    """A random cluster id as Kafka writes them (22 characters of URL-safe base64), never
    starting with ``-``: the storage tool's argument parser takes such a value for an option
    and refuses to format ("argument --cluster-id/-t: expected one argument"), one start in
    64. Kafka's own ``Uuid.randomUuid`` draws again for the same reason."""
    import base64

    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def stop(data_dir: Path = DEFAULT_DATA_DIR, timeout_s: float = 30.0) -> bool:
    """Stop the broker this data dir started and wait for it; False if none ran."""
    paths = BrokerPaths(data_dir.expanduser().resolve())
    pid = read_pid(paths)
    if pid is None:
        print("no Kafka broker started by switchyard is running")
        paths.pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and read_pid(paths) is not None:
        time.sleep(0.2)
    if read_pid(paths) is not None:
        logger.warning("broker %s ignored SIGTERM for %.0f s; killing it", pid, timeout_s)
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    paths.pid_file.unlink(missing_ok=True)
    print(f"Kafka stopped (pid {pid})")
    return True


def status(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    """Print whether the local broker runs and where; True if it does."""
    paths = BrokerPaths(data_dir.expanduser().resolve())
    pid = read_pid(paths)
    if pid is None:
        print(f"Kafka is not running (data dir {paths.data_dir})")
        return False
    port = paths.port_file.read_text().strip() if paths.port_file.exists() else "?"
    ready = broker_ready(f"127.0.0.1:{port}", 2.0)
    print(f"Kafka {'running' if ready else 'starting (not answering yet)'}: pid {pid}, "
          f"bootstrap 127.0.0.1:{port}, data {paths.data_dir}, logs {paths.log_file}")
    if port.isdigit() and kafka_secure.configured(paths):
        kafka_secure.describe(paths, int(port))
    note = many_partitions_note(paths)
    if note:
        print(note)
    return ready


def main_guard(fn: Callable[..., object], *args: Any, false_ok: bool = False, **kwargs: Any) -> int:
    """Run a broker command, turning KafkaError into a message and exit code 1.

    A command answering False exits 1 (``status``: not running) unless ``false_ok``
    (``stop`` with nothing to stop is still a success: stop is idempotent).
    """
    try:
        result = fn(*args, **kwargs)
    except KafkaError as exc:
        print(f"switchyard kafka: {exc}", file=sys.stderr)
        return 1
    return 0 if (result is not False or false_ok) else 1
