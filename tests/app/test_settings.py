"""The settings object: environment prefix, validation, secrets that never print."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


def test_defaults_are_local_and_safe():
    s = Settings(_env_file=None)
    assert s.broker == "127.0.0.1:9092"
    assert s.web_bind == "127.0.0.1"
    assert s.web_port == 6066
    assert s.store == "rocksdb://"
    assert s.web_debug_routes is False
    assert s.policy == "switchyard"


def test_environment_prefix(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_BROKER", "a:1,b:2")
    monkeypatch.setenv("SWITCHYARD_POLICY", "jsq")
    monkeypatch.setenv("SWITCHYARD_WEB_PORT", "7000")
    s = Settings()
    assert s.broker_url == "kafka://a:1;b:2"
    assert s.policy == "jsq"
    assert s.web_port == 7000


@pytest.mark.parametrize("given", ["kafka://a:1;b:2", "kafka://a:1,kafka://b:2", " a:1 ; b:2 "])
def test_fausts_url_form_is_accepted_and_normalised(monkeypatch, given):
    monkeypatch.setenv("SWITCHYARD_BROKER", given)
    s = Settings()
    assert s.broker == "a:1,b:2" and s.broker_url == "kafka://a:1;b:2"


@pytest.mark.parametrize("broker", ["nohost", "host:", ":9092", "host:port", "kafka://",
                                    "http://a:1", "kafka://a:1/path"])
def test_bad_broker_is_rejected(monkeypatch, broker):
    monkeypatch.setenv("SWITCHYARD_BROKER", broker)
    with pytest.raises(ValidationError):
        Settings()


def test_unknown_policy_is_rejected(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_POLICY", "fastest")
    with pytest.raises(ValidationError):
        Settings()


def test_sasl_settings_and_secrets_never_print(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("SWITCHYARD_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("SWITCHYARD_SASL_USERNAME", "router")
    monkeypatch.setenv("SWITCHYARD_SASL_PASSWORD", "hunter2-secret")
    s = Settings()
    kwargs = s.kafka_client_kwargs()
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "router"
    assert kwargs["sasl_plain_password"] == "hunter2-secret"
    assert "hunter2-secret" not in repr(s)
    assert "hunter2-secret" not in str(s)
    assert "hunter2-secret" not in str(s.public_view())
    assert s.public_view()["sasl_password"] == "**********"


def test_plaintext_needs_no_security_kwargs():
    assert Settings().kafka_client_kwargs() == {"security_protocol": "PLAINTEXT"}


def test_ssl_context_only_for_ssl_protocols(monkeypatch):
    assert Settings().ssl_context() is None
    monkeypatch.setenv("SWITCHYARD_SECURITY_PROTOCOL", "SSL")
    assert Settings().ssl_context() is not None


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("given", [{}, {"SASL_USERNAME": "router"}, {"SASL_PASSWORD": "pw"}])
def test_sasl_without_credentials_is_refused_at_start(monkeypatch, protocol, given):
    """A missing SASL username or password is named at start-up, not found out by a broker."""
    monkeypatch.setenv("SWITCHYARD_SECURITY_PROTOCOL", protocol)
    for name, value in given.items():
        monkeypatch.setenv(f"SWITCHYARD_{name}", value)
    with pytest.raises(ValidationError, match="SWITCHYARD_SASL_"):
        Settings()


def test_ssl_keyfile_needs_a_certfile(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("SWITCHYARD_SSL_KEYFILE", "/etc/client.key")
    with pytest.raises(ValidationError, match="SWITCHYARD_SSL_CERTFILE"):
        Settings()


def test_security_settings_a_protocol_does_not_use_are_not_checked(monkeypatch):
    """PLAINTEXT with stray SASL/SSL variables (as the reliability suite's canary) starts."""
    monkeypatch.setenv("SWITCHYARD_SASL_PASSWORD", "unused")
    monkeypatch.setenv("SWITCHYARD_SSL_KEYFILE", "/etc/unused.key")
    assert Settings().kafka_client_kwargs() == {"security_protocol": "PLAINTEXT"}


def test_an_executors_link_price_and_power_model_are_checked() -> None:
    from app.executor_main import remote_options
    from app.settings import Settings
    from models.transfer import Link

    settings = Settings()
    assert remote_options(settings, None, None, None, None) == (None, None, None)
    link, price, model = remote_options(settings, 20.0, 100.0, 4.0, "cpu-core")
    assert link == Link(20.0, 100.0) and price == 4.0 and model is not None
    for args, reason in (((20.0, -1.0, None, None), "bandwidth_mbit_s must be"),
                         ((20.0, None, None, None), "needs both"),
                         ((None, None, -1.0, None), "price_per_hour"),
                         ((None, None, None, "pdp-11"), "no catalog device")):
        with pytest.raises(ValueError, match=reason):
            remote_options(settings, *args)
    with pytest.raises(ValueError, match="needs both"):
        Settings(executor_link_rtt_ms=5.0)
    with pytest.raises(ValueError):
        Settings(executor_link_rtt_ms=5.0, executor_link_bandwidth_mbit_s=-3.0)
    env = Settings(executor_link_rtt_ms=5.0, executor_link_bandwidth_mbit_s=50.0,
                   executor_price_per_hour=2.5)
    assert remote_options(env, None, None, None, None)[:2] == (Link(5.0, 50.0), 2.5)


def test_key_partition_is_kafkas_default_partitioner() -> None:
    """An executor places a batch of outcomes on its workloads' partition by computing it
    (app.topics.key_partition): it must be where Kafka's default partitioner puts the key."""
    from aiokafka.partitioner import DefaultPartitioner

    from app.topics import key_partition

    for count in (1, 4, 7):
        for i in range(200):
            key = f"wl-{i}-{'x' * (i % 5)}"
            assert key_partition(key, count) == DefaultPartitioner()(
                key.encode(), list(range(count)), list(range(count)))


def test_topic_names_come_from_the_settings(monkeypatch) -> None:
    """Every name is built from ``Settings.topic_namespace`` (issue 12: not from the environment
    read once at import), so two namespaces can live in one process."""
    from app.executor import Executor
    from runtimes.sim_rt import SimRuntime

    monkeypatch.setenv("SWITCHYARD_TOPIC_NAMESPACE", "from-env.")
    assert Settings().topic_names.workloads == "from-env.switchyard.workloads"
    one, other = Settings(topic_namespace="a."), Settings(topic_namespace="")
    assert one.topic_names.results == "a.switchyard.results"
    assert other.topic_names.results == "switchyard.results"  # the contract's own names
    assert one.topic_names.route("sim-h100") == "a.switchyard.routes.sim-h100"
    assert one.topic_names.executor_group("sim-h100") == "a.switchyard-executor.sim-h100"
    with pytest.raises(ValueError, match="not topic-safe"):
        one.topic_names.route("Bad Class")
    executor = Executor(one, SimRuntime("h100"), "dev-0")
    try:
        assert executor.route_topic == "a.switchyard.routes.sim-h100"
        assert executor.group_id == "a.switchyard-executor.sim-h100"
        assert executor.topics.metrics == "a.switchyard.metrics"
    finally:
        executor.compute.shutdown(wait=False)
