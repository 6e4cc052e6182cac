"""app/loop.py: which event loop the processes run on."""

from __future__ import annotations

import asyncio

import pytest

from app import loop


def test_asyncio_by_default_uvloop_when_asked_and_faust_is_told(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHYARD_EVENT_LOOP", raising=False)
    monkeypatch.delenv("FAUST_LOOP", raising=False)
    assert loop.wanted() == "asyncio"
    assert loop.choose_event_loop() == "aio"
    monkeypatch.setenv("SWITCHYARD_EVENT_LOOP", "uvloop")
    assert loop.wanted() == "uvloop"  # a dependency, so installed here
    assert loop.choose_event_loop() == "uvloop"


def test_asyncio_when_asked_and_an_explicit_faust_loop_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_EVENT_LOOP", "asyncio")
    monkeypatch.delenv("FAUST_LOOP", raising=False)
    assert loop.choose_event_loop() == "aio"
    monkeypatch.setenv("SWITCHYARD_EVENT_LOOP", "uvloop")
    monkeypatch.setenv("FAUST_LOOP", "aio")
    assert loop.choose_event_loop() == "aio"


def test_an_unknown_loop_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_EVENT_LOOP", "trio")
    with pytest.raises(ValueError, match="uvloop or asyncio"):
        loop.wanted()


def test_run_runs_the_coroutine_on_the_chosen_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    async def loop_type() -> str:
        return type(asyncio.get_running_loop()).__module__

    monkeypatch.setenv("SWITCHYARD_EVENT_LOOP", "uvloop")
    assert loop.run(loop_type()).startswith("uvloop")
    monkeypatch.setenv("SWITCHYARD_EVENT_LOOP", "asyncio")
    assert loop.run(loop_type()).startswith("asyncio")
