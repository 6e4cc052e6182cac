"""Reading heartbeats back while the broker is away (agents/registry.py::read_back): the
worker goes on. In CI a broker kill found the re-route timer's read-back raising out of the
timer, which stopped the whole worker."""

from __future__ import annotations

import asyncio
import socket

import pytest

from app.gaps import GapReader
from app.settings import Settings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


def test_read_back_with_no_broker_says_none_instead_of_raising(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agents import registry

    unreachable = GapReader(Settings(broker=f"127.0.0.1:{_closed_port()}"))
    monkeypatch.setattr(registry, "reader", unreachable)
    assert asyncio.run(registry.read_back()) is None
