"""``switchyard demo``: its pure decisions, and the real command (``--once`` with a small load,
and Ctrl-C), which must leave no process behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from app import demo
from app.local import free_port

ROOT = Path(__file__).resolve().parents[2]


# --- pure parts: no broker ------------------------------------------------------------------
@pytest.mark.parametrize(("broker", "local"), [
    ("127.0.0.1:9092", True), ("localhost:9092,127.0.0.1:9093", True), ("[::1]:9092", True),
    ("kafka.example:9092", False), ("127.0.0.1:9092,10.0.0.5:9092", False),
])
def test_only_a_local_broker_may_be_started(broker: str, local: bool) -> None:
    assert demo.broker_is_local(broker) is local


def test_ensure_broker_starts_one_only_when_none_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    monkeypatch.setattr(demo.kafka_local, "start", lambda port: started.append(port))
    monkeypatch.setattr(demo.kafka_local, "broker_ready", lambda broker, timeout: True)
    assert demo.ensure_broker("127.0.0.1:9092") is False and started == []
    monkeypatch.setattr(demo.kafka_local, "broker_ready", lambda broker, timeout: False)
    assert demo.ensure_broker("127.0.0.1:9333") is True and started == [9333]
    with pytest.raises(SystemExit, match="not on this machine"):
        demo.ensure_broker("kafka.example:9092")
    assert started == [9333]


def test_executor_plan() -> None:
    assert demo.executor_plan(False, []) == [("numpy", "cpu"), ("torch", "cpu"), ("jax", "cpu")]
    plan = demo.executor_plan(True, ["cuda:0"])
    assert ("torch", "cuda:0") in plan
    assert [d for r, d in plan if r == "sim"] == list(demo.SIM_MODELS)


def test_web_port_falls_back_when_taken() -> None:
    port = free_port()
    assert demo.web_port(port) == port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        other = demo.web_port(port)
    assert other != port


# --- the real command ---------------------------------------------------------------------------
def start_demo(broker: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "SWITCHYARD_BROKER": broker, "SWITCHYARD_WEB_PORT": str(free_port()),
           "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "app.cli", "demo", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def descendants(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def kill_all(proc: subprocess.Popen[str], children: set[int]) -> None:
    """SIGKILL a demo that did not stop and every process it started: they run in sessions of
    their own, so killing the demo alone left a busy worker behind that slowed every later
    test of the run (seen after a CI failure of the Ctrl-C test)."""
    for pid in alive(children | descendants(proc.pid)):
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()
    proc.kill()


def alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.kafka
def test_demo_once_runs_a_load_and_prints_the_address(broker: str) -> None:
    proc = start_demo(broker, "--once", "--workloads", "20", "--rate", "10")
    children: set[int] = set()
    deadline = time.monotonic() + 400
    while proc.poll() is None and time.monotonic() < deadline:
        children |= descendants(proc.pid)
        time.sleep(0.5)
    if proc.poll() is None:
        kill_all(proc, children)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stdout + stderr[-3000:]
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/", stdout)
    assert "sent 20, results 20 (ok 20, error 0), missing 0" in stdout
    assert "results [" in stderr  # the progress bar
    assert len(children) >= 4, "a worker and three executors were started"
    assert alive(children) == set(), "the demo left processes behind"


@pytest.mark.kafka
def test_ctrl_c_stops_everything_the_demo_started(broker: str) -> None:
    proc = start_demo(broker, "--workloads", "10", "--rate", "5")
    assert proc.stdout is not None
    deadline = time.monotonic() + 300
    line = ""
    while time.monotonic() < deadline and "dashboard:" not in line:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
    assert "dashboard:" in line, proc.communicate(timeout=30)[1][-3000:]
    children = descendants(proc.pid)
    assert len(children) >= 4
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            kill_all(proc, children)
    assert proc.returncode == 0, stderr[-3000:]
    assert "interrupted: stopping everything the demo started" in stderr
    time.sleep(0.5)
    assert alive(children) == set(), "Ctrl-C left processes behind"
