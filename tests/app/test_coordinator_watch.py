"""The coordinator watch on a consumer of the running loop, as an executor runs it
(app/coordinator_watch.py: ``check_here``). The Faust worker's use, through its consumer
thread, is tested in tests/app/test_faust_patches.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka.client import AIOKafkaClient

from app.coordinator_watch import CoordinatorWatch


def consumer(coordinator_id: int | None, client: object = None) -> SimpleNamespace:
    coordinator = SimpleNamespace(coordinator_id=coordinator_id,
                                  _coordinator_lookup_lock=asyncio.Lock())
    return SimpleNamespace(_coordinator=coordinator, _client=client)


async def test_an_executors_consumer_whose_coordinator_stays_unknown_is_woken() -> None:
    """Unknown past after_s: the report, and the client's dead metadata synchronizer is
    started again (nothing else would serve the coordinator lookup's forced update)."""
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")

    async def died() -> None:
        raise RuntimeError("synchronizer died")
    client._sync_task = asyncio.create_task(died())
    await asyncio.sleep(0)
    watch = CoordinatorWatch(after_s=20.0)
    lost = consumer(None, client)
    assert not watch.check_here(lost, 100.0)  # first seen unknown: the clock starts
    assert not watch.check_here(lost, 119.0) and client._sync_task.done()
    assert watch.check_here(lost, 121.0) and watch.reports == 1
    assert not client._sync_task.done()  # a new synchronizer runs
    assert not watch.check_here(consumer(1, client), 122.0)  # found again: the clock resets
    assert watch.unknown_since is None
    client._sync_task.cancel()
    await client.close()
