"""Security: Kafka SASL/SSL settings, secrets that never leak, a read-only web view bound to
127.0.0.1, and workload specs that are data only, with limits that stop one request from
exhausting memory.

The settings unit tests extend tests/app/test_settings.py; the live checks use the session's
shared cluster, which is configured with a canary SASL/SSL password it never needs.
"""

from __future__ import annotations

import json
import pickle
import ssl
import subprocess
import tracemalloc
import urllib.error
import urllib.request
from pathlib import Path

import faust
import psutil
import pytest
from pydantic import ValidationError

from app.main import broker_credentials, create_app
from app.settings import Settings
from models.ops import SpecError
from models.workload import WorkloadLimits, decode_json_bounded, parse_workload
from tests.reliability.harness import CANARY_SECRET, Shared

KEY_PASSWORD = "key-pass-55e1"
WEB_PATHS = ["/", "/api/health", "/api/devices", "/api/models", "/api/windows",
             "/api/decisions", "/api/dashboard", "/metrics"]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed CA certificate and an encrypted client key (openssl)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "client.pem", folder / "client.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1",
                    "-subj", "/CN=switchyard-test", "-keyout", str(key), "-out", str(cert),
                    "-passout", f"pass:{KEY_PASSWORD}"], check=True, capture_output=True)
    return {"cafile": cert, "certfile": cert, "keyfile": key}


# --- settings ----------------------------------------------------------------------------------
def test_sasl_ssl_settings_build_clients_and_faust_credentials(monkeypatch, tls_files):
    """SASL_SSL from the environment: aiokafka kwargs with a context that holds the client
    certificate, and Faust SASL credentials carrying the same context."""
    env = {"SECURITY_PROTOCOL": "SASL_SSL", "SASL_MECHANISM": "SCRAM-SHA-256",
           "SASL_USERNAME": "router", "SASL_PASSWORD": "s3cret-sasl",
           "SSL_CAFILE": str(tls_files["cafile"]), "SSL_CERTFILE": str(tls_files["certfile"]),
           "SSL_KEYFILE": str(tls_files["keyfile"]), "SSL_PASSWORD": KEY_PASSWORD}
    for name, value in env.items():
        monkeypatch.setenv(f"SWITCHYARD_{name}", value)
    settings = Settings()
    kwargs = settings.kafka_client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-256"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    credentials = broker_credentials(settings)
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.ssl_context is not None
    for secret in ("s3cret-sasl", KEY_PASSWORD):
        assert secret not in repr(settings) and secret not in json.dumps(settings.public_view())


def test_ssl_settings_give_faust_ssl_credentials(monkeypatch, tls_files):
    """SSL alone: no SASL fields, an SSL context, Faust SSL credentials."""
    monkeypatch.setenv("SWITCHYARD_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("SWITCHYARD_SSL_CAFILE", str(tls_files["cafile"]))
    settings = Settings()
    kwargs = settings.kafka_client_kwargs()
    assert "sasl_mechanism" not in kwargs and isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert isinstance(broker_credentials(settings), faust.SSLCredentials)


def test_wrong_key_password_fails_loudly(monkeypatch, tls_files):
    """A wrong key password is an error at start-up, not a silent plaintext fallback."""
    monkeypatch.setenv("SWITCHYARD_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("SWITCHYARD_SSL_CERTFILE", str(tls_files["certfile"]))
    monkeypatch.setenv("SWITCHYARD_SSL_KEYFILE", str(tls_files["keyfile"]))
    monkeypatch.setenv("SWITCHYARD_SSL_PASSWORD", "not-the-password")
    with pytest.raises(ssl.SSLError):
        Settings().ssl_context()


def test_encrypted_key_without_password_fails_without_prompting(monkeypatch, tls_files):
    """No SWITCHYARD_SSL_PASSWORD for an encrypted key: an SSLError, never OpenSSL's
    passphrase prompt (which stalls a worker started from a terminal and, without one,
    fails with a bare OSError "Invalid argument")."""
    monkeypatch.setenv("SWITCHYARD_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("SWITCHYARD_SSL_CERTFILE", str(tls_files["certfile"]))
    monkeypatch.setenv("SWITCHYARD_SSL_KEYFILE", str(tls_files["keyfile"]))
    with pytest.raises(ssl.SSLError):
        Settings().ssl_context()


@pytest.mark.parametrize(("name", "value"), [("SECURITY_PROTOCOL", "SASL"),
                                             ("SASL_MECHANISM", "GSSAPI"),
                                             ("SECURITY_PROTOCOL", "plaintext ")])
def test_unsupported_security_settings_are_refused(monkeypatch, name, value):
    monkeypatch.setenv(f"SWITCHYARD_{name}", value)
    with pytest.raises(ValidationError):
        Settings()


def test_web_view_defaults_to_loopback_and_read_only():
    """The app binds 127.0.0.1 and keeps Faust's table and debug pages off by default."""
    conf = create_app(Settings(), app_id="security-check").conf
    assert conf.web_bind == "127.0.0.1" and conf.web_host == "127.0.0.1"
    assert not (conf.web_tables_enabled or conf.web_router_enabled or conf.web_graph_enabled)


# --- workload specs are data only ----------------------------------------------------------
def test_pickles_and_code_are_not_workloads():
    """A pickle is not UTF-8 JSON; code is just an unknown op kind or field."""
    limits = WorkloadLimits()
    hostile = [pickle.dumps({"op": "matmul"}), json.dumps({
        "id": "x", "op": {"kind": "__import__('os').system('id')"}}).encode(),
        json.dumps({"id": "x", "op": {"kind": "matmul", "m": 1, "k": 1, "n": 1,
                                      "dtype": "float32"}, "__reduce__": "os.system"}).encode()]
    for raw in hostile:
        with pytest.raises(SpecError):
            parse_workload(decode_json_bounded(raw, limits.max_message_bytes, limits.max_depth),
                           limits)


@pytest.mark.parametrize("op", [
    {"kind": "matmul", "m": 2**31, "k": 2**31, "n": 2**31, "dtype": "float32"},
    {"kind": "bmm", "b": 10**6, "m": 10**6, "k": 10**6, "n": 10**6, "dtype": "float32"},
    {"kind": "mlp", "batch": 2**20, "dims": [2**20] * 64, "activation": "relu",
     "dtype": "float32"},
])
def test_huge_requests_are_refused_without_allocating(op):
    """Limits are checked on the declared shapes, before anything is allocated."""
    tracemalloc.start()
    try:
        with pytest.raises(SpecError):
            parse_workload({"id": "huge", "op": op})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"refusing {op['kind']} allocated {peak} bytes"


def test_oversized_message_is_refused_before_decoding():
    with pytest.raises(SpecError, match="over the limit"):
        decode_json_bounded(b" " * 2048, max_bytes=1024, max_depth=32)


# --- the live worker ---------------------------------------------------------------------------
def _request(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=b"{}" if method != "GET" else None)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.kafka
def test_secrets_never_in_logs_or_web_answers(shared: Shared):
    """The canary password configured on every process shows up nowhere."""
    port = shared.cluster.web_port
    for path in WEB_PATHS:
        status, body = _request(port, path)
        assert status == 200, path
        assert CANARY_SECRET.encode() not in body, f"{path} shows the secret"
    for proc in [shared.worker, *shared.executors]:
        assert CANARY_SECRET not in proc.log_tail(10**9), f"{proc.name}'s log shows the secret"


@pytest.mark.kafka
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_web_view_refuses_writes(shared: Shared, method: str):
    for path in [*WEB_PATHS, "/table/completed/", "/router/"]:
        status, _ = _request(shared.cluster.web_port, path, method)
        assert status in (404, 405), f"{method} {path} answered {status}"


@pytest.mark.kafka
def test_web_view_listens_on_loopback_only(shared: Shared):
    port = shared.cluster.web_port
    listening = [c.laddr for c in psutil.Process(shared.worker.popen.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
    for path in ("/table/completed/", "/router/", "/graph/"):
        assert _request(port, path)[0] == 404, f"{path} is exposed"
