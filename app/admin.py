"""Deliberate topic creation: the broker may refuse to auto-create, and an auto-created topic
would get the broker's default partition count rather than the one the contract needs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

from app.settings import Settings

logger = logging.getLogger(__name__)


async def ensure_topics(settings: Settings, partitions: Mapping[str, int]) -> None:
    """Create each missing topic with its partition count (existing topics are left alone)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.broker, **settings.kafka_client_kwargs())
    try:
        await admin.start()
    except KafkaConnectionError as exc:
        # The first contact of every process: aiokafka says only "Unable to bootstrap" and
        # logs the reason (a refused SASL login, an untrusted certificate) separately.
        await admin.close()
        raise KafkaConnectionError(
            f"cannot reach Kafka at {settings.broker} over {settings.security_protocol}: "
            f"{exc.args[0] if exc.args else exc}; aiokafka's log line above says why",
        ) from exc
    try:
        existing = set(await admin.list_topics())
        missing = [NewTopic(name, count, 1) for name, count in partitions.items()
                   if name not in existing]
        if missing:
            # created meanwhile by another process: fine
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
            logger.info("created topics %s", ", ".join(t.name for t in missing))
    finally:
        await admin.close()


def contract_topics(settings: Settings) -> dict[str, int]:
    """Every fixed topic of the contract with its partition count."""
    names = settings.topic_names
    return {
        names.workloads: settings.workload_partitions,
        names.outcomes: settings.workload_partitions,
        names.reroutes: settings.workload_partitions,
        names.metrics: settings.metric_partitions,
        names.heartbeats: settings.metric_partitions,
        names.deadletter: 1,
    }
