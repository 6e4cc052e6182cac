"""The registry stage as an agent, in Faust's test context with the in-memory store the test
process builds its worker with (tests/conftest.py, app.main.build): heartbeats in, the devices
table out, a malformed one dead-lettered. No broker: the dead-letter topic's send is replaced
by a recorder (the one fake here; the stage's parsing, batching and table writes are real)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any
from unittest import mock

from agents import registry
from app.main import built
from app.records import DeadLetterRecord
from app.tables import devices


def heartbeat(device_id: str, **change: Any) -> bytes:
    now = int(time.time() * 1000)
    return json.dumps({"device_id": device_id, "device_class": "numpy-cpu-x86",
                       "runtime": "numpy", "device": "cpu", "capabilities": [["fp32", "eager"]],
                       "queue_depth": 0, "sent_at_ms": now, "started_at_ms": now,
                       **change}).encode()


async def stored(device_id: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """The device's record once the agent's batch (up to 0.2 s) has been written."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = devices.get(device_id)
        if record is not None:
            return record
        await asyncio.sleep(0.02)
    return None


async def test_the_registry_agent_keeps_each_devices_newest_heartbeat_and_dead_letters_the_rest(
) -> None:
    worker = built()
    assert worker.settings.store.startswith("memory://")  # the test process's own worker
    sent: list[dict[str, Any]] = []

    async def record_send(key: Any = None, value: bytes = b"", **_: Any) -> None:
        sent.append(json.loads(value))

    with mock.patch.object(worker.topics.deadletter, "send", side_effect=record_send):
        async with registry.registry.test_context() as agent:
            await agent.put(key=b"dev-a", value=heartbeat("dev-a", queue_depth=1))
            await agent.put(key=b"dev-a", value=heartbeat("dev-a", queue_depth=3))
            await agent.put(key=b"dev-b", value=b"{not json")
            await agent.put(key=b"dev-c", value=heartbeat("dev-c", device_class="no spaces!"))
            record = await stored("dev-a")
            for _ in range(100):
                if len(sent) == 2:
                    break
                await asyncio.sleep(0.02)

    assert record is not None
    assert record["queue_depth"] == 3  # the newest of the batch
    assert record["last_seen_ms"] >= record["sent_at_ms"]
    assert devices.get("dev-b") is None and devices.get("dev-c") is None
    assert [DeadLetterRecord.from_data(d).stage for d in sent] == ["registry", "registry"]
    assert base64.b64decode(sent[0]["raw_b64"]) == b"{not json"
    assert "topic-safe" in sent[1]["reason"]
