"""Secure listeners for the local broker (``switchyard kafka start --secure``).

SASL_PLAINTEXT, SSL and SASL_SSL listen next to PLAINTEXT. The first secure start of a data dir
makes, under ``DATA_DIR/secure/``, a private CA whose certificate clients trust (``ca.pem``), the
broker's keystore signed by it (with the JDK's keytool) and a random SASL password; every start
writes one file of ``SWITCHYARD_*`` client settings per listener. Files holding a password are
the owner's alone, and no password is ever printed or put on a command line.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from secrets import token_urlsafe

from app.kafka_config import BrokerPaths, KafkaError, broker_ready, server_properties, write_private

# Secure listeners sit at fixed offsets from the client port (the controller has port+1), so
# one --port says where everything listens. Inter-broker and controller traffic stay PLAINTEXT.
SECURE_LISTENERS = {"SASL_PLAINTEXT": 2, "SSL": 3, "SASL_SSL": 4}
SASL_USERNAME = "switchyard"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
# keytool reads the keystore password from this variable of its own environment, never from
# its command line, which any local user can read in /proc.
KEYSTORE_PASSWORD_ENV = "SY_KEYSTORE_PASSWORD"
JDK_HINT = "e.g. `apt-get install openjdk-17-jdk-headless`"


@dataclass(frozen=True)
class SecureSecrets:
    """The secure listeners' passwords: the broker keystore's and the SASL client's."""

    keystore_password: str = field(repr=False)
    client_password: str = field(repr=False)


def secure_server_properties(port: int, controller_port: int, paths: BrokerPaths,
                             secrets: SecureSecrets) -> str:
    """The broker configuration with the secure listeners (see ``server_properties``)."""
    return server_properties(port, controller_port, paths,
                             {name: port + offset for name, offset in SECURE_LISTENERS.items()},
                             _secure_properties(paths, secrets))


def _secure_properties(paths: BrokerPaths, secure: SecureSecrets) -> list[str]:
    # SASL PLAIN with one user, declared per listener (no JAAS file, no -D option); the
    # broker needs no username/password of its own since inter-broker traffic is PLAINTEXT.
    jaas = f'{PLAIN_LOGIN_MODULE} required user_{SASL_USERNAME}="{secure.client_password}";'
    return [
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={paths.keystore}",
        f"ssl.keystore.password={secure.keystore_password}",
        f"ssl.key.password={secure.keystore_password}",
        "ssl.client.auth=none",
    ]


def _find_keytool(java: str) -> str:
    keytool = shutil.which("keytool")
    beside_java = Path(java).resolve().parent / "keytool"
    if keytool is None and beside_java.exists():
        keytool = str(beside_java)
    if keytool is None:
        raise KafkaError("`--secure` makes the broker's certificate with keytool, which comes "
                         f"with the JDK ({JDK_HINT}); it is neither on PATH nor next to {java}.")
    return keytool


def _keytool(keytool: str, password: str, cwd: Path, *args: str) -> None:
    proc = subprocess.run(
        [keytool, *args, "-storetype", "PKCS12", "-storepass:env", KEYSTORE_PASSWORD_ENV],
        cwd=cwd, env={**os.environ, KEYSTORE_PASSWORD_ENV: password},
        stdin=subprocess.DEVNULL, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise KafkaError(f"keytool {args[0]} failed while making the broker's certificate "
                         f"under {cwd}:\n{(proc.stdout + proc.stderr)[-1500:]}")


def _make_certificates(keytool: str, password: str, work: Path) -> None:
    """A private CA (kept only as ca.pem) and a broker keystore whose certificate it signed,
    valid for 127.0.0.1 and localhost: what a client verifying the broker's name needs."""
    ca, broker = ["-keystore", "ca.p12"], ["-keystore", "broker.p12"]
    _keytool(keytool, password, work, "-genkeypair", "-alias", "ca", *ca, "-keyalg", "RSA",
             "-keysize", "2048", "-validity", "3650", "-dname", "CN=Switchyard local CA",
             "-ext", "bc:c=ca:true", "-ext", "ku:c=keyCertSign,cRLSign")
    _keytool(keytool, password, work, "-exportcert", "-rfc", "-alias", "ca", *ca,
             "-file", "ca.pem")
    _keytool(keytool, password, work, "-genkeypair", "-alias", "broker", *broker,
             "-keyalg", "RSA", "-keysize", "2048", "-validity", "825", "-dname", "CN=localhost")
    _keytool(keytool, password, work, "-certreq", "-alias", "broker", *broker,
             "-file", "broker.csr")
    _keytool(keytool, password, work, "-gencert", "-alias", "ca", *ca, "-rfc",
             "-infile", "broker.csr", "-outfile", "broker.pem", "-validity", "825",
             "-ext", "SAN=ip:127.0.0.1,dns:localhost",
             "-ext", "ku:c=digitalSignature,keyEncipherment", "-ext", "eku=serverAuth")
    _keytool(keytool, password, work, "-importcert", "-noprompt", "-alias", "ca", *broker,
             "-file", "ca.pem")
    _keytool(keytool, password, work, "-importcert", "-noprompt", "-alias", "broker", *broker,
             "-file", "broker.pem")


def ensure_secure_files(paths: BrokerPaths, java: str) -> SecureSecrets:
    """The secure listeners' certificate and passwords: made once per data dir, then reused
    (clients keep trusting the same CA across restarts)."""
    if paths.secrets_file.exists() and paths.keystore.exists() and paths.ca_cert.exists():
        try:
            return SecureSecrets(**json.loads(paths.secrets_file.read_text()))
        except (ValueError, TypeError) as exc:
            raise KafkaError(f"{paths.secrets_file} is unreadable ({type(exc).__name__}); "
                             f"remove {paths.secure_dir} to make new certificates") from None
    keytool = _find_keytool(java)
    paths.secure_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(paths.secure_dir, 0o700)
    work = paths.secure_dir / "partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    secrets = SecureSecrets(keystore_password=token_urlsafe(24),
                            client_password=token_urlsafe(24))
    _make_certificates(keytool, secrets.keystore_password, work)
    os.chmod(work / "broker.p12", 0o600)
    os.chmod(work / "ca.pem", 0o644)  # public: what clients trust
    os.replace(work / "broker.p12", paths.keystore)
    os.replace(work / "ca.pem", paths.ca_cert)
    # The CA's key goes with the work folder: nothing else is ever signed with it.
    shutil.rmtree(work)
    write_private(paths.secrets_file, json.dumps(
        {"keystore_password": secrets.keystore_password,
         "client_password": secrets.client_password}))
    return secrets


def client_settings(paths: BrokerPaths, port: int, secrets: SecureSecrets,
                    ) -> dict[str, dict[str, str]]:
    """Per secure listener, the SWITCHYARD_* variables a client of it needs."""
    settings = {}
    for protocol, offset in SECURE_LISTENERS.items():
        env = {"SWITCHYARD_BROKER": f"127.0.0.1:{port + offset}",
               "SWITCHYARD_SECURITY_PROTOCOL": protocol}
        if protocol.startswith("SASL"):
            env.update({"SWITCHYARD_SASL_MECHANISM": "PLAIN",
                        "SWITCHYARD_SASL_USERNAME": SASL_USERNAME,
                        "SWITCHYARD_SASL_PASSWORD": secrets.client_password})
        if protocol.endswith("SSL"):
            env["SWITCHYARD_SSL_CAFILE"] = str(paths.ca_cert)
        settings[protocol] = env
    return settings


def write_client_env(paths: BrokerPaths, port: int, secrets: SecureSecrets) -> list[Path]:
    """Write one env file per secure listener (``set -a; . FILE; set +a`` loads it)."""
    written = []
    for protocol, env in client_settings(paths, port, secrets).items():
        lines = [f"# Switchyard client settings for the local broker's {protocol} listener",
                 *(f"{name}={shlex.quote(value)}" for name, value in env.items()), ""]
        write_private(paths.client_env(protocol), "\n".join(lines))
        written.append(paths.client_env(protocol))
    return written


def read_client_env(data_dir: Path, protocol: str) -> dict[str, str]:
    """The SWITCHYARD_* variables of one secure listener of a broker started with --secure."""
    path = BrokerPaths(data_dir.expanduser().resolve()).client_env(protocol)
    if not path.exists():
        raise KafkaError(f"no {path}: start the broker with `switchyard kafka start --secure`")
    env = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            env[name.strip()] = shlex.split(value)[0] if value else ""
    return env


def configured(paths: BrokerPaths) -> bool:
    """Whether the data dir's broker is configured with the secure listeners."""
    try:
        return "SASL_SSL://" in paths.config.read_text()
    except OSError:
        return False


def check_ports_free(port: int) -> None:
    """Fail with the listener's name when one of the secure ports is taken (the broker
    would exit at start with a bind error deep in its log)."""
    for protocol, offset in SECURE_LISTENERS.items():
        with socket.socket() as sock:
            # As the broker will bind it: a port in TIME_WAIT is free to it.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port + offset))
            except OSError as exc:
                raise KafkaError(f"port {port + offset}, for the {protocol} listener (port+"
                                 f"{offset}), is not free ({exc.strerror}); choose another "
                                 "--port") from None


def wait_ready(paths: BrokerPaths, port: int, secrets: SecureSecrets,
               timeout_s: float = 30.0) -> None:
    """Wait until the SASL_SSL listener takes the generated credentials: it proves the
    keystore, the CA file and the JAAS entry agree, not just that the broker runs."""
    bootstrap = f"127.0.0.1:{port + SECURE_LISTENERS['SASL_SSL']}"
    security = {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                "sasl_plain_username": SASL_USERNAME,
                "sasl_plain_password": secrets.client_password,
                "ssl_context": ssl.create_default_context(cafile=str(paths.ca_cert))}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if broker_ready(bootstrap, 3.0, **security):
            return
        time.sleep(0.5)
    raise KafkaError(f"the broker runs, but its SASL_SSL listener at {bootstrap} does not "
                     f"accept the generated credentials; see {paths.log_file}")


def describe(paths: BrokerPaths, port: int) -> None:
    """Print where the secure listeners are and where their client settings are (the
    password only ever goes to the env files)."""
    listeners = ", ".join(f"{name} 127.0.0.1:{port + offset}"
                          for name, offset in SECURE_LISTENERS.items())
    print(f"secure listeners: {listeners} (SASL user {SASL_USERNAME!r}, PLAIN; CA "
          f"{paths.ca_cert})")
    files = " ".join(str(paths.client_env(name)) for name in SECURE_LISTENERS)
    print(f"client settings (SWITCHYARD_* variables, password included): {files}; "
          f"load one with `set -a; . {paths.client_env('SASL_SSL')}; set +a`")


def prepare(paths: BrokerPaths, port: int, java: str) -> SecureSecrets:
    """Before a secure start: free ports, certificate and passwords, client env files."""
    check_ports_free(port)
    secrets = ensure_secure_files(paths, java)
    write_client_env(paths, port, secrets)
    return secrets
