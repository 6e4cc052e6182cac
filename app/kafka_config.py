"""What the local broker and its secure listeners share: the broker's files, its
configuration, a readiness probe and the error worded for the terminal.

``app.kafka_local`` (start, stop, status) and ``app.kafka_secure`` (SASL and TLS listeners)
both build on this module, so neither imports the other to get at it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class KafkaError(RuntimeError):
    """A problem with the local broker, worded for the person at the terminal."""


@dataclass(frozen=True)
class BrokerPaths:
    """Where one local broker keeps its configuration, logs, data and pid."""

    data_dir: Path

    @property
    def config(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_config(self) -> Path:
        return self.data_dir / "log4j2.properties"

    @property
    def logs(self) -> Path:
        return self.data_dir / "logs"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "broker.log"

    @property
    def kraft(self) -> Path:
        return self.data_dir / "kraft"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def port_file(self) -> Path:
        return self.data_dir / "broker.port"

    @property
    def secure_dir(self) -> Path:
        return self.data_dir / "secure"

    @property
    def keystore(self) -> Path:
        return self.secure_dir / "broker.p12"

    @property
    def ca_cert(self) -> Path:
        return self.secure_dir / "ca.pem"

    @property
    def secrets_file(self) -> Path:
        return self.secure_dir / "secrets.json"

    def client_env(self, protocol: str) -> Path:
        """The file of SWITCHYARD_* client settings for one secure listener."""
        return self.secure_dir / f"{protocol.lower()}.env"


def server_properties(port: int, controller_port: int, paths: BrokerPaths,
                      listeners: Mapping[str, int] | None = None, extra: Sequence[str] = (),
                      ) -> str:
    """The broker configuration: one node that is broker and controller, tuned to start fast.

    ``listeners`` adds client listeners (name, which is also the security protocol, and port)
    next to PLAINTEXT; ``extra`` lines configure them (``app.kafka_secure``).
    """
    client = {"PLAINTEXT": port, **(listeners or {})}
    advertised = ",".join(f"{name}://127.0.0.1:{p}" for name, p in client.items())
    protocols = ",".join(f"{name}:{name}" for name in client)
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
            f"listeners={advertised},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners={advertised}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{protocols}",
            f"log.dirs={paths.kraft}",
            "num.partitions=1",
            # One node: every internal topic has one replica, and one partition is plenty
            # (the default 50 offsets partitions alone add seconds to the first start).
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            # Consumers join at once instead of waiting 3 s for more members.
            "group.initial.rebalance.delay.ms=0",
            # Topics are created deliberately, with their partition counts: an auto-created topic
            # would get one partition and break co-partitioning with the tables.
            "auto.create.topics.enable=false",
            "delete.topic.enable=true",
            "log.retention.hours=24",
            "message.max.bytes=16777216",
            *extra,
            "",
        ]
    )


def write_private(path: Path, text: str) -> None:
    """Write a file that only its owner may read (it holds a password)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)  # an older file may have had wider permissions
        out.write(text)


async def _metadata_ok(bootstrap: str, timeout_s: float = 3.0, **security: Any) -> bool:
    from aiokafka import AIOKafkaClient  # a real metadata request, the readiness signal

    # Refused connections are the expected answer while a broker starts: not worth a log line.
    aiokafka_logger = logging.getLogger("aiokafka")
    level = aiokafka_logger.level
    aiokafka_logger.setLevel(logging.CRITICAL)
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000),
                            **security)
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        return bool(client.cluster.brokers())
    except Exception:  # noqa: BLE001 - any failure means "not ready yet"
        return False
    finally:
        await client.close()
        aiokafka_logger.setLevel(level)


def broker_ready(bootstrap: str, timeout_s: float = 3.0, **security: Any) -> bool:
    """Whether a metadata request to ``bootstrap`` succeeds (``security``: aiokafka's
    security_protocol, ssl_context and sasl_* arguments, for a secure listener)."""
    return asyncio.run(_metadata_ok(bootstrap, timeout_s, **security))
