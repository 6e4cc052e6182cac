"""Kafka SASL and TLS end to end, through the settings object and nothing else.

The module starts a broker of its own (own ports and data dir) with `switchyard kafka start
--secure`'s listeners: SASL_PLAINTEXT, SSL and SASL_SSL next to PLAINTEXT, a private CA and a
random SASL password. Every client here is configured only by the SWITCHYARD_* variables the
broker wrote for its listener: the admin helper and plain aiokafka clients per protocol, then,
over SASL_SSL, a worker, a sim executor and `switchyard submit` as separate processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError

from app import kafka_local, kafka_secure
from app.admin import ensure_topics
from app.kafka_local import KafkaError
from app.settings import Settings
from tests.conftest import IN_CI
from tests.reliability.harness import (
    alive_check,
    new_cluster,
    start_executors,
    topic_names,
    workloads,
)

pytestmark = pytest.mark.kafka

PROTOCOLS = ["SASL_PLAINTEXT", "SSL", "SASL_SSL"]
# Every wait is bounded: a refused client must fail, not hang.
CLIENT_TIMEOUT_S = 30.0
PIPELINE_WORKLOADS = 36


@dataclass(frozen=True)
class SecureBroker:
    """This module's broker: its PLAINTEXT port (secure listeners at +2, +3, +4) and data dir."""

    port: int
    data_dir: Path

    def env(self, protocol: str) -> dict[str, str]:
        """The SWITCHYARD_* variables the broker wrote for one secure listener."""
        return kafka_secure.read_client_env(self.data_dir, protocol)

    def password(self) -> str:
        return self.env("SASL_SSL")["SWITCHYARD_SASL_PASSWORD"]


def _free_port_run(count: int = 5) -> int:
    """A port whose next ``count - 1`` ports are free too (client, controller, 3 secure)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError(f"no run of {count} free ports")


@pytest.fixture(scope="module")
def secure_broker() -> Iterator[SecureBroker]:
    """A local broker started with secure listeners; stopped and removed afterwards.

    Locally, a missing JDK, keytool or Kafka jars skip with the reason; in CI they fail.
    """
    base = Path(os.environ.get("SWITCHYARD_RELIABILITY_WORKDIR", "/tmp/sy-reliability"))
    data_dir = base / f"secure-broker-{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:6]}"
    port = _free_port_run()
    try:
        try:
            kafka_local.start(port, data_dir, secure=True)
        except KafkaError as exc:
            message = f"no secure local broker: {exc}"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
        yield SecureBroker(port, data_dir)
    finally:
        kafka_local.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Settings:
    """Settings read from the environment, holding exactly ``env``'s SWITCHYARD_* variables."""
    for name in list(os.environ):
        if name.startswith("SWITCHYARD_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


# --- the broker's own files ---------------------------------------------------------------------
def test_secure_start_keeps_secrets_private_and_never_prints_them(secure_broker, capsys):
    """The CLI on a running secure broker is idempotent and says where the client settings
    are; files holding the password are the owner's alone; the CA certificate is public."""
    from app.cli import main

    argv = ["kafka", "start", "--port", str(secure_broker.port),
            "--data-dir", str(secure_broker.data_dir), "--secure"]
    assert main(argv) == 0
    assert main(["kafka", "status", "--data-dir", str(secure_broker.data_dir)]) == 0
    out = capsys.readouterr()
    secure_dir = secure_broker.data_dir / "secure"
    assert str(secure_dir / "sasl_ssl.env") in out.out
    assert f"SASL_SSL 127.0.0.1:{secure_broker.port + 4}" in out.out
    assert secure_broker.password() not in out.out + out.err
    private = [secure_dir / name for name in ("broker.p12", "secrets.json", "sasl_plaintext.env",
                                              "ssl.env", "sasl_ssl.env")]
    private.append(secure_broker.data_dir / "server.properties")
    for path in private:
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert (secure_dir.stat().st_mode & 0o777) == 0o700
    assert "BEGIN CERTIFICATE" in (secure_dir / "ca.pem").read_text()
    assert not list(secure_dir.glob("ca.p12")), "the CA's private key is kept"


# --- clients, one protocol at a time ----------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_admin_producer_and_consumer_work_over(secure_broker, monkeypatch, unique,
                                                     protocol):
    """Create a topic with the admin helper, produce and consume one record, all with the
    settings' own client arguments."""
    settings = _settings(monkeypatch, secure_broker.env(protocol))
    assert settings.security_protocol == protocol
    assert settings.broker != f"127.0.0.1:{secure_broker.port}"  # not the PLAINTEXT listener
    topic = f"sy-secure-{protocol.lower()}-{unique}"
    await asyncio.wait_for(ensure_topics(settings, {topic: 2}), CLIENT_TIMEOUT_S)

    kwargs = {"bootstrap_servers": settings.broker, **settings.kafka_client_kwargs()}
    admin = AIOKafkaAdminClient(**kwargs)
    await asyncio.wait_for(admin.start(), CLIENT_TIMEOUT_S)
    try:
        described = await admin.describe_topics([topic])
        assert len(described[0]["partitions"]) == 2
    finally:
        await admin.close()

    producer = AIOKafkaProducer(acks="all", **kwargs)
    await asyncio.wait_for(producer.start(), CLIENT_TIMEOUT_S)
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, b'{"hello": "secure"}',
                                                      key=protocol.encode()), CLIENT_TIMEOUT_S)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(topic, group_id=f"sy-secure-{unique}",
                                auto_offset_reset="earliest", **kwargs)
    await asyncio.wait_for(consumer.start(), CLIENT_TIMEOUT_S)
    try:
        record = await asyncio.wait_for(consumer.getone(), CLIENT_TIMEOUT_S)
    finally:
        await consumer.stop()
    assert (record.key, record.value) == (protocol.encode(), b'{"hello": "secure"}')


async def _refused(settings: Settings, caplog: pytest.LogCaptureFixture) -> str:
    """Contact the broker with the admin helper; return what aiokafka logged when refused."""
    # TimeoutError rather than KafkaConnectionError would mean a hang: the test fails.
    with caplog.at_level(logging.ERROR, logger="aiokafka"), \
            pytest.raises(KafkaConnectionError) as refusal:
        await asyncio.wait_for(ensure_topics(settings, {"sy-secure-never": 1}),
                               CLIENT_TIMEOUT_S)
    # The error names where and how it tried, for the operator reading it.
    assert f"{settings.broker} over {settings.security_protocol}" in str(refusal.value)
    return caplog.text


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
async def test_wrong_sasl_password_is_refused(secure_broker, monkeypatch, caplog, protocol):
    """A wrong password is an authentication failure, at once."""
    env = {**secure_broker.env(protocol), "SWITCHYARD_SASL_PASSWORD": "not-the-password"}
    started = time.monotonic()
    logged = await _refused(_settings(monkeypatch, env), caplog)
    assert "SaslAuthenticationFailed" in logged, logged
    assert time.monotonic() - started < CLIENT_TIMEOUT_S


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
async def test_tls_without_the_ca_file_fails_verification(secure_broker, monkeypatch, caplog,
                                                          protocol):
    """Without SWITCHYARD_SSL_CAFILE the system's CAs are used, and they do not vouch for the
    broker's certificate: the handshake fails rather than trusting it."""
    env = {k: v for k, v in secure_broker.env(protocol).items()
           if k != "SWITCHYARD_SSL_CAFILE"}
    settings = _settings(monkeypatch, env)
    assert settings.ssl_cafile is None
    logged = await _refused(settings, caplog)
    assert "CERTIFICATE_VERIFY_FAILED" in logged, logged


# --- the whole pipeline over SASL_SSL ---------------------------------------------------------
async def _partitions(admin: AIOKafkaAdminClient, topic: str) -> list[TopicPartition]:
    (described,) = await admin.describe_topics([topic])
    return [TopicPartition(topic, p["partition"]) for p in described["partitions"]]


async def _group_lag(settings: Settings, group: str, topic: str) -> int:
    """Records of ``topic`` that ``group`` has not committed (-1 while unknown)."""
    kwargs = {"bootstrap_servers": settings.broker, **settings.kafka_client_kwargs()}
    admin = AIOKafkaAdminClient(**kwargs)
    consumer = AIOKafkaConsumer(group_id=None, **kwargs)
    await admin.start()
    await consumer.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
        partitions = await _partitions(admin, topic)
        if not partitions:
            return -1
        ends = await consumer.end_offsets(partitions)
        return sum(max(0, end - (committed[tp].offset if tp in committed else 0))
                   for tp, end in ends.items())
    finally:
        await consumer.stop()
        await admin.close()


async def _key_counts(settings: Settings, topic: str) -> Counter[str]:
    """How many records each key has on ``topic``, read from the beginning to its end."""
    kwargs = {"bootstrap_servers": settings.broker, **settings.kafka_client_kwargs()}
    admin = AIOKafkaAdminClient(**kwargs)
    await admin.start()
    try:
        partitions = await _partitions(admin, topic)
    finally:
        await admin.close()
    assert partitions, f"no partitions for {topic}"
    consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **kwargs)
    await consumer.start()
    counts: Counter[str] = Counter()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "results topic not read to its end"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                counts.update(r.key.decode() for r in records if r.key and r.value)
    finally:
        await consumer.stop()
    return counts


def _raw_get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        assert response.status == 200, path
        return bytes(response.read())


@pytest.mark.timeout(900)
def test_pipeline_over_sasl_ssl_gives_one_result_per_workload(secure_broker, monkeypatch,
                                                              workdir, unique):
    """Worker, sim executor and `switchyard submit`, configured only by the SASL_SSL
    listener's SWITCHYARD_* variables: every workload gets exactly one result, and the
    password shows up in no process log and no web answer."""
    env = secure_broker.env("SASL_SSL")
    password = env["SWITCHYARD_SASL_PASSWORD"]
    settings = _settings(monkeypatch, env)  # this test's own reader, from the same variables
    cluster = new_cluster(workdir, env["SWITCHYARD_BROKER"], **env)
    names = topic_names(cluster.namespace)
    trace = workdir / "trace.jsonl"
    trace_workloads = workloads(PIPELINE_WORKLOADS, f"sec-{unique}-")
    ids = [str(w["id"]) for w in trace_workloads]
    trace.write_text("".join(json.dumps(w) + "\n" for w in trace_workloads))
    with cluster:
        worker = cluster.start_worker()
        executors = start_executors(cluster, ["h100"])
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)

        submit = subprocess.run(
            [sys.executable, "-m", "app.cli", "submit", "--trace", str(trace), "--wait",
             "--timeout", "300"],
            env=cluster.base_env(), capture_output=True, text=True, timeout=420,
        )
        submit_output = submit.stdout + submit.stderr
        assert submit.returncode == 0, submit_output
        assert f"results {PIPELINE_WORKLOADS} (ok {PIPELINE_WORKLOADS}," in submit.stdout, \
            submit_output

        # Once the worker has committed every outcome, a duplicate would already be there.
        everyone = alive_check(worker, *executors)
        deadline = time.monotonic() + 60
        while asyncio.run(_group_lag(settings, cluster.app_id, names["outcomes"])) != 0:
            assert not (reason := everyone()), reason
            assert time.monotonic() < deadline, "the worker did not commit every outcome"
            time.sleep(1.0)
        counts = asyncio.run(_key_counts(settings, names["results"]))
        web = {path: _raw_get(cluster.web_port, path)
               for path in ("/api/health", "/api/dashboard")}
        assert worker.alive() and all(p.alive() for p in executors)

    lost = [i for i in ids if counts[i] == 0]
    duplicated = {i: counts[i] for i in ids if counts[i] > 1}
    assert not lost, f"{len(lost)} workloads without a result: {lost[:10]}"
    assert not duplicated, f"duplicate results: {duplicated}"

    secrets = {"SASL password": password, "keystore password": json.loads(
        (secure_broker.data_dir / "secure" / "secrets.json").read_text())["keystore_password"]}
    logs = {proc.name: proc.log_tail(10**9) for proc in [worker, *executors]}
    logs["submit"] = submit_output
    for log in (secure_broker.data_dir / "logs").glob("*.log"):
        logs[f"broker {log.name}"] = log.read_text(errors="replace")
    for what, secret in secrets.items():
        for path, body in web.items():
            assert secret.encode() not in body, f"{path} shows the {what}"
        for name, text in logs.items():
            assert secret not in text, f"{name}'s log shows the {what}"
