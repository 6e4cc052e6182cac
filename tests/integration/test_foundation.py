"""The foundation on the real broker: a Faust agent in a real worker reads one topic and writes
another; the broker manager is idempotent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import kafka_local
from tests.integration.kafka_io import consume_until, create_topics, produce

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]


async def test_faust_worker_reads_one_topic_and_writes_another(broker, unique, tmp_path):
    source, sink = f"test.echo.in.{unique}", f"test.echo.out.{unique}"
    await create_topics(broker, [source, sink])
    env = {**os.environ, "ECHO_IN": source, "ECHO_OUT": sink, "ECHO_APP_ID": f"echo-{unique}",
           "SWITCHYARD_BROKER": broker, "SWITCHYARD_DATA_DIR": str(tmp_path),
           "SWITCHYARD_STORE": "memory://"}
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - the worker writes it; closed below
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.echo_app", "worker", "-l", "warn",
         "--without-web"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        await produce(broker, source, [(f"k{i}", f"hello {i}".encode()) for i in range(20)])
        def died() -> str | None:
            if worker.poll() is None:
                return None
            return "worker exited:\n" + (tmp_path / "worker.log").read_text()[-3000:]

        out = await consume_until(broker, sink, lambda m: len(m) >= 20, timeout_s=90,
                                  decode=False, abort=died)
        assert sorted(m["value"] for m in out) == sorted(f"HELLO {i}".encode() for i in range(20))
        assert {m["key"] for m in out} == {f"k{i}" for i in range(20)}
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()


def test_kafka_start_status_stop_is_idempotent(broker, tmp_path, capsys):
    # A second broker on its own port and data dir, so the shared one is untouched.
    port = 19192
    data = tmp_path / "kafka"
    started = time.monotonic()
    assert kafka_local.start(port, data) == f"127.0.0.1:{port}"
    first_start_s = time.monotonic() - started
    pid = kafka_local.read_pid(kafka_local.BrokerPaths(data.resolve()))
    assert pid is not None
    try:
        # start on a running broker is a no-op that reports where it runs
        assert kafka_local.start(port, data) == f"127.0.0.1:{port}"
        assert kafka_local.read_pid(kafka_local.BrokerPaths(data.resolve())) == pid
        assert "already running" in capsys.readouterr().out
        assert kafka_local.status(data) is True
        assert kafka_local.broker_ready(f"127.0.0.1:{port}")
    finally:
        assert kafka_local.stop(data) is True
    assert kafka_local.read_pid(kafka_local.BrokerPaths(data.resolve())) is None
    assert not kafka_local.broker_ready(f"127.0.0.1:{port}", 1.0)
    assert kafka_local.stop(data) is False  # stopping twice is harmless
    assert kafka_local.status(data) is False
    print(f"first start of a fresh broker: {first_start_s:.1f} s")  # a figure, not a pass mark
