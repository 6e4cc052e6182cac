"""The Faust patches (app/faust_patches.py) are in force in the worker's app."""

from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace
from typing import Any

import pytest
from faust.exceptions import PartitionsMismatch
from faust.tables.base import Collection
from faust.transport.drivers import aiokafka as faust_aiokafka

from app import faust_patches
from app.main import app


def test_faust_version_is_the_one_the_patches_were_tested_against() -> None:
    assert importlib.metadata.version("faust-streaming").startswith(faust_patches.TESTED_FAUST)


async def test_every_faust_producer_is_idempotent() -> None:
    """The worker's producer asks aiokafka for idempotence and acks=all, at least once too."""
    producer = app.producer
    assert isinstance(producer, faust_aiokafka.Producer)
    assert app.conf.processing_guarantee.value == "at_least_once"
    assert producer._settings_extra() == {"acks": "all", "enable_idempotence": True}
    built = producer._new_producer()  # aiokafka's producer, never started
    assert built._txn_manager is not None, "aiokafka built a non-idempotent producer"
    assert built._txn_manager.transactional_id is None  # idempotence, not transactions
    await built.client.close()


def test_installing_twice_is_harmless() -> None:
    before = faust_aiokafka.Producer._settings_extra
    faust_patches.install()
    assert faust_aiokafka.Producer._settings_extra is before


def _table_with(partitions: dict[str, int | None]) -> Any:
    consumer = SimpleNamespace(topic_partitions=partitions.get)
    return SimpleNamespace(app=SimpleNamespace(consumer=consumer), name="t",
                           changelog_topic_name="t-changelog",
                           _verified_source_topics_for_partitions=set())


def test_a_changelog_not_yet_in_the_metadata_is_no_partition_mismatch() -> None:
    table = _table_with({"source": 4, "t-changelog": 0})
    Collection._verify_source_topic_partitions(table, "source")  # no PartitionsMismatch
    assert table._verified_source_topics_for_partitions == set()  # checked again next time
    table.app.consumer.topic_partitions = {"source": 4, "t-changelog": 4}.get
    Collection._verify_source_topic_partitions(table, "source")
    assert table._verified_source_topics_for_partitions == {"source"}


def test_a_real_partition_mismatch_still_raises() -> None:
    table = _table_with({"source": 4, "t-changelog": 2})
    with pytest.raises(PartitionsMismatch):
        Collection._verify_source_topic_partitions(table, "source")


async def test_a_created_topic_is_waited_for_until_the_metadata_lists_it() -> None:
    """Faust goes on only once the broker's metadata has the topic's partitions."""
    answers = iter([None, set(), {0, 1, 2, 3}])
    asked: list[str] = []

    class Client:
        async def fetch_all_metadata(self) -> Any:
            partitions = next(answers)
            return SimpleNamespace(partitions_for_topic=lambda topic: asked.append(topic)
                                   or partitions)

    created: list[str] = []
    original = faust_patches.faust_aiokafka.Transport._create_topic
    try:
        async def fake_create(self: Any, owner: Any, client: Any, topic: str, *args: Any,
                              **kwargs: Any) -> None:
            created.append(topic)
        faust_aiokafka.Transport._create_topic = fake_create
        faust_aiokafka.Transport._switchyard_waits_for_topics = False
        faust_patches.install_topic_creation_wait()
        await faust_aiokafka.Transport._create_topic(None, None, Client(), "t-changelog", 4, 1)
    finally:
        faust_aiokafka.Transport._create_topic = original
        faust_aiokafka.Transport._switchyard_waits_for_topics = True
    assert created == ["t-changelog"] and asked == ["t-changelog"] * 3
