"""The local broker's secure listeners: configuration, certificates, client settings (the
real broker is started in tests/reliability/test_security_e2e.py)."""

from __future__ import annotations

import pytest

from app import kafka_local, kafka_secure
from app.kafka_local import BrokerPaths, KafkaError


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_secure_properties_add_sasl_and_tls_listeners(tmp_path):
    """SASL_PLAINTEXT, SSL and SASL_SSL at port+2..+4, PLAIN with one user per SASL listener;
    the brokers and the controller still talk PLAINTEXT."""
    paths = BrokerPaths(tmp_path)
    secrets = kafka_secure.SecureSecrets(keystore_password="ks-pw", client_password="client-pw")
    props = _props(kafka_secure.secure_server_properties(9092, 9093, paths, secrets))
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,"
                                  "SSL://127.0.0.1:9095,SASL_SSL://127.0.0.1:9096,"
                                  "CONTROLLER://127.0.0.1:9093")
    assert "CONTROLLER" not in props["advertised.listeners"]
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert set(props["listener.security.protocol.map"].split(",")) == {
        "CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT", "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "SSL:SSL", "SASL_SSL:SASL_SSL"}
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    for listener in ("sasl_plaintext", "sasl_ssl"):
        jaas = props[f"listener.name.{listener}.plain.sasl.jaas.config"]
        assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")
        assert 'user_switchyard="client-pw";' in jaas
    assert props["ssl.keystore.location"] == str(paths.keystore)
    assert props["ssl.keystore.type"] == "PKCS12"
    assert "ks-pw" not in repr(secrets) and "client-pw" not in repr(secrets)
    # Without secrets, nothing secure is configured.
    plain = _props(kafka_local.server_properties(9092, 9093, paths))
    assert not any(k.startswith(("sasl", "ssl", "listener.name")) for k in plain)


def test_client_env_files_are_private_and_load_as_settings(tmp_path, monkeypatch):
    """One env file per secure listener, 0600, readable back into the settings object."""
    from app.settings import Settings

    paths = BrokerPaths(tmp_path)
    paths.secure_dir.mkdir()
    secrets = kafka_secure.SecureSecrets(keystore_password="ks", client_password="c-pw_1")
    written = kafka_secure.write_client_env(paths, 9092, secrets)
    assert [p.name for p in written] == ["sasl_plaintext.env", "ssl.env", "sasl_ssl.env"]
    for path in written:
        assert path.stat().st_mode & 0o777 == 0o600
    env = kafka_secure.read_client_env(tmp_path, "SASL_SSL")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.broker == "127.0.0.1:9096"
    assert settings.security_protocol == "SASL_SSL" and settings.sasl_username == "switchyard"
    assert settings.sasl_password is not None
    assert settings.sasl_password.get_secret_value() == "c-pw_1"
    assert settings.ssl_cafile == paths.ca_cert
    assert "SWITCHYARD_SASL_PASSWORD" not in kafka_secure.read_client_env(tmp_path, "SSL")


def test_secure_listeners_are_described_without_the_password(tmp_path, capsys):
    kafka_secure.describe(BrokerPaths(tmp_path), 9092)
    out = capsys.readouterr().out
    assert "SASL_SSL 127.0.0.1:9096" in out and str(tmp_path / "secure" / "sasl_ssl.env") in out
    assert "PASSWORD" not in out


def test_missing_keytool_is_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.setattr(kafka_secure.shutil, "which", lambda name: None)
    fake_java = tmp_path / "bin" / "java"
    fake_java.parent.mkdir()
    fake_java.touch()
    with pytest.raises(KafkaError, match="keytool, which comes with the JDK"):
        kafka_secure.ensure_secure_files(BrokerPaths(tmp_path / "data"), str(fake_java))


def test_failing_keytool_is_a_kafka_error_without_the_password(tmp_path, monkeypatch):
    keytool = tmp_path / "keytool"
    keytool.write_text("#!/bin/sh\necho \"keytool error: java.lang.Exception: no way\" >&2\n"
                       "exit 1\n")
    keytool.chmod(0o755)
    monkeypatch.setattr(kafka_secure.shutil, "which", lambda name: str(keytool))
    with pytest.raises(KafkaError, match="keytool -genkeypair failed") as info:
        kafka_secure.ensure_secure_files(BrokerPaths(tmp_path / "data"), "/usr/bin/java")
    assert "no way" in str(info.value)
    assert not (tmp_path / "data" / "secure" / "secrets.json").exists()


def test_secure_ports_in_use_are_named(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] - 3  # its SSL listener's port is taken
        with pytest.raises(KafkaError, match=f"port {port + 3}, for the SSL listener"):
            kafka_secure.check_ports_free(port)
