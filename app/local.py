"""Start and stop a local Switchyard — worker and executors as real processes — and wait for
readiness rather than sleeping. Used by ``switchyard demo``, the integration and reliability
tests and the benchmarks, so they all run the system the same way.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DUMP_WAIT_S = 2.0  # for the processes to write their stacks (stop(dump=True))


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    """One process of the local cluster, with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    # The device ids it serves, where it is an executor of several (``--instances``).
    devices: tuple[str, ...] = ()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class LocalCluster:
    """A worker and executors sharing one topic namespace and one broker.

    ``namespace`` prefixes every topic (SWITCHYARD_TOPIC_NAMESPACE) and ``app_id`` names the
    worker's consumer group and tables, so clusters started side by side do not see each
    other's data. ``env`` adds SWITCHYARD_* settings for every process.
    """

    broker: str = "127.0.0.1:9092"
    namespace: str = ""
    app_id: str = "switchyard"
    workdir: Path = field(default_factory=lambda: Path("data"))
    env: dict[str, str] = field(default_factory=dict)
    web_port: int = field(default_factory=free_port)
    procs: list[Proc] = field(default_factory=list)

    @classmethod
    def isolated(cls, workdir: Path, broker: str = "127.0.0.1:9092", **env: str) -> LocalCluster:
        """A cluster with a fresh namespace and app id under ``workdir``."""
        tag = uuid.uuid4().hex[:8]
        return cls(broker=broker, namespace=f"sy-{tag}.", app_id=f"switchyard-{tag}",
                   workdir=workdir, env=dict(env))

    def base_env(self) -> dict[str, str]:
        """The environment every process of this cluster gets."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SWITCHYARD_BROKER": self.broker,
               "SWITCHYARD_TOPIC_NAMESPACE": self.namespace, "SWITCHYARD_APP_ID": self.app_id}
        env.update(self.env)
        return env

    def _spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None,
               cpus: tuple[int, ...] | None = None) -> Proc:
        """Start ``argv`` as ``name``, logging to ``<workdir>/<name>.log`` (on ``cpus`` only,
        set before it runs, so every thread it starts inherits them)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"{name}.log"
        pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**self.base_env(), **(extra_env or {})},
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not them
                preexec_fn=pin,
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    # --- the worker ------------------------------------------------------------------------
    def start_worker(self, name: str = "worker", data_dir: Path | None = None,
                     web_port: int | None = None, cpus: tuple[int, ...] | None = None,
                     **env: str) -> Proc:
        """Start a Faust worker process (it becomes ready later: see ``wait_ready``), on
        ``cpus`` only if given."""
        port = web_port or self.web_port
        # Faust keeps tables under <data dir>/v1/tables whatever the app id: a data dir per
        # app id keeps a reused workdir from mixing two clusters' stores.
        default_dir = self.workdir / f"{name}-{self.app_id}-data"
        extra = {"SWITCHYARD_DATA_DIR": str(data_dir or default_dir),
                 "SWITCHYARD_WEB_PORT": str(port), **env}
        return self._spawn(name, [sys.executable, "-m", "app", "worker", "-l", "info",
                                  "--web-port", str(port)], extra, cpus)

    def health(self, web_port: int | None = None) -> dict[str, Any] | None:
        """The worker's /api/health answer, or None when it does not answer."""
        url = f"http://127.0.0.1:{web_port or self.web_port}/api/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return dict(json.loads(response.read()))
        except (OSError, ValueError):
            return None

    def api(self, path: str, web_port: int | None = None) -> Any:
        """GET a JSON document from the worker's web view."""
        url = f"http://127.0.0.1:{web_port or self.web_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())

    def api_text(self, path: str, web_port: int | None = None) -> str:
        """GET a text document (``/metrics``) from the worker's web view."""
        url = f"http://127.0.0.1:{web_port or self.web_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode("utf-8"))

    def wait_ready(self, proc: Proc, timeout_s: float = 120.0, web_port: int | None = None,
                   ) -> float:
        """Wait until the worker has its partitions and recovered its tables."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
            answer = self.health(web_port)
            if answer and answer.get("ready"):
                return time.monotonic() - started
            time.sleep(0.25)
        raise TimeoutError(f"{proc.name} not ready after {timeout_s:.0f} s:\n{proc.log_tail()}")

    # --- executors -----------------------------------------------------------------------------
    def start_executor(self, runtime: str, device: str = "cpu", threads: int | None = 1,
                       device_id: str | None = None, slowdown_file: Path | None = None,
                       drift: str | None = None, extra_args: tuple[str, ...] = (),
                       instances: int = 1, **env: str) -> Proc:
        """Start an executor process (``extra_args``: more of its command-line options, e.g.
        ``("--link-rtt-ms", "20", "--link-bandwidth-mbit-s", "100")``); ``instances`` > 1: a
        process serving that many simulated devices, ``<device_id>-0`` ... (``Proc.devices``);
        ``runtime`` "torch,jax": one process hosting both, ``<device_id>-torch`` ...)."""
        device_id = device_id or f"{runtime}-{device.replace(':', '')}-{uuid.uuid4().hex[:6]}"
        argv = [sys.executable, "-m", "app.cli", "executor", "--runtime", runtime,
                "--device", device, "--id", device_id]
        if instances != 1:
            argv += ["--instances", str(instances)]
        if threads is not None:
            argv += ["--threads", str(threads)]
        if slowdown_file is not None:
            argv += ["--slowdown-file", str(slowdown_file)]
        if drift is not None:
            argv += ["--drift", drift]
        proc = self._spawn(device_id, argv + list(extra_args), env)
        if instances != 1:
            proc.devices = tuple(f"{device_id}-{i}" for i in range(instances))
        elif "," in runtime:  # several runtimes in one process, one queue
            proc.devices = tuple(f"{device_id}-{name}" for name in runtime.split(","))
        return proc

    def wait_devices(self, device_ids: Iterable[str], timeout_s: float = 120.0) -> float:
        """Wait until the worker's registry lists every device id as live."""
        wanted = set(device_ids)
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            for proc in self.procs:
                if (proc.name in wanted or wanted.intersection(proc.devices)) and not proc.alive():
                    raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
            try:
                live = {d["device_id"] for d in self.api("/api/devices")["devices"] if d["live"]}
            except (OSError, ValueError, KeyError):
                live = set()
            if wanted <= live:
                return time.monotonic() - started
            time.sleep(0.5)
        raise TimeoutError(f"devices {sorted(wanted)} not live after {timeout_s:.0f} s")

    # --- stopping ------------------------------------------------------------------------------
    def kill(self, proc: Proc, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one process (SIGKILL: a crash) and reap it."""
        if proc.alive():
            proc.popen.send_signal(sig)
            try:
                proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(10)

    def stop(self, timeout_s: float = 20.0, dump: bool = False) -> None:
        """SIGTERM every process, wait, then SIGKILL what is left. With ``dump``, every live
        process first writes its threads' and asyncio tasks' stacks to its log (SIGUSR1:
        ``app.loop.install_stack_dump`` in the executors, mode's own in the Faust worker):
        where a stalled scenario's processes were waiting."""
        if dump:
            live = [proc for proc in self.procs if proc.alive()]
            for proc in live:
                proc.popen.send_signal(signal.SIGUSR1)
            if live:
                time.sleep(DUMP_WAIT_S)
        for proc in self.procs:
            if proc.alive():
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                proc.popen.wait(remaining)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(10)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(dump=exc_type is not None)  # left by an error: say where everyone was
