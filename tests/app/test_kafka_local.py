"""The local broker manager's logic (the real start/stop is in tests/integration)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app import kafka_local
from app.kafka_local import BrokerPaths, KafkaError


def test_pinned_version_is_kafka_4():
    assert kafka_local.kafka_version().startswith("4.")


def test_server_properties_single_node_kraft(tmp_path):
    text = kafka_local.server_properties(9092, 9093, BrokerPaths(tmp_path))
    props = dict(line.split("=", 1) for line in text.splitlines() if line)
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["log.dirs"] == str(tmp_path / "kraft")


def test_read_pid_ignores_missing_stale_and_foreign_pids(tmp_path):
    paths = BrokerPaths(tmp_path)
    assert kafka_local.read_pid(paths) is None
    paths.pid_file.write_text("not a pid")
    assert kafka_local.read_pid(paths) is None
    paths.pid_file.write_text("999999999")
    assert kafka_local.read_pid(paths) is None
    paths.pid_file.write_text(str(os.getpid()))  # alive, but it is not a Kafka broker
    assert kafka_local.read_pid(paths) is None


def test_stop_without_a_broker_is_harmless(tmp_path, capsys):
    assert kafka_local.stop(tmp_path) is False
    assert "no Kafka broker" in capsys.readouterr().out
    assert kafka_local.main_guard(kafka_local.stop, tmp_path, false_ok=True) == 0
    assert kafka_local.main_guard(kafka_local.status, tmp_path) == 1


def test_missing_java_is_a_clear_message_not_a_stack_trace(monkeypatch, capsys):
    monkeypatch.setattr(kafka_local.shutil, "which", lambda name: None)
    with pytest.raises(KafkaError) as info:
        kafka_local._require_tools()
    text = str(info.value)
    assert "Java" in text and "JDK 17" in text and "docker compose" in text
    monkeypatch.setattr(kafka_local, "broker_ready", lambda *a, **k: False)
    assert kafka_local.main_guard(kafka_local.start, 19999, Path("/nonexistent-sy")) == 1
    assert "switchyard kafka:" in capsys.readouterr().err


def test_cli_help_lists_every_contract_command():
    from app.cli import build_parser

    text = build_parser().format_help()
    for command in ("kafka", "worker", "executor", "submit", "demo", "bench", "profile"):
        assert command in text


def test_secure_start_refuses_a_broker_it_did_not_start(monkeypatch, tmp_path):
    """--secure cannot add listeners to someone else's broker: an error, not a silent no."""
    monkeypatch.setattr(kafka_local, "broker_ready", lambda *a, **k: True)
    with pytest.raises(KafkaError, match="cannot add listeners"):
        kafka_local.start(19999, tmp_path, secure=True)


def test_an_exited_child_broker_is_not_running(tmp_path):
    """A broker this process started and that exited is a zombie until reaped: read_pid
    reaps it instead of reporting it alive (stop() then waited 30 s and sent SIGKILL)."""
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().split(") ")[1][0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    paths = BrokerPaths(tmp_path)
    paths.pid_file.write_text(str(child.pid))
    assert kafka_local.read_pid(paths) is None
    child.wait()  # already reaped: Popen copes


def test_cli_kafka_start_takes_secure():
    from app.cli import build_parser

    ns = build_parser().parse_args(["kafka", "start", "--port", "19092", "--secure"])
    assert ns.secure is True
    assert build_parser().parse_args(["kafka", "start"]).secure is False


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage tool takes a leading ``-`` for an option and refuses to format (a CI run
    failed so, one start in 64): such a draw is replaced, as Kafka's own Uuid.randomUuid does."""
    import base64
    import uuid

    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))  # 0b111110..: base64url '-' first
    assert base64.urlsafe_b64encode(dash_first.bytes).decode().startswith("-")
    draws = iter([dash_first, uuid.UUID(bytes=bytes(range(16)))])
    monkeypatch.setattr(kafka_local.uuid, "uuid4", lambda: next(draws))
    value = kafka_local.cluster_id()
    assert value == "AAECAwQFBgcICQoLDA0ODw" and len(value) == 22


def test_a_broker_holding_thousands_of_partitions_is_pointed_out(tmp_path):
    """`start` and `status` say when the data dir holds `MANY_PARTITIONS` or more partition
    directories (``<topic>-<n>``), and how to start empty; other entries do not count."""
    paths = BrokerPaths(tmp_path)
    assert kafka_local.partition_count(paths) == 0
    assert kafka_local.many_partitions_note(paths) is None
    paths.kraft.mkdir(parents=True)
    (paths.kraft / "meta.properties").write_text("")
    (paths.kraft / "cleaner-offset-checkpoint").write_text("")
    for i in range(kafka_local.MANY_PARTITIONS - 1):
        (paths.kraft / f"sy-{i:05d}.switchyard.results-{i % 4}").mkdir()
    (paths.kraft / "not-a-partition").mkdir()
    assert kafka_local.partition_count(paths) == kafka_local.MANY_PARTITIONS - 1
    assert kafka_local.many_partitions_note(paths) is None
    (paths.kraft / "__consumer_offsets-0").mkdir()
    note = kafka_local.many_partitions_note(paths)
    assert note is not None and f"holds {kafka_local.MANY_PARTITIONS} partitions" in note
    assert f"rm -rf {paths.data_dir}" in note
