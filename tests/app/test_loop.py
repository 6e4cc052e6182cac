"""app/loop.py: which event loop the processes run on."""

from __future__ import annotations

import asyncio
from pathlib import Path

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


STUCK = """
import asyncio, functools
from app.loop import run

async def waiting_for_an_ack_that_never_comes():
    # "ready" once this task awaits (a signal while it runs would show it running instead)
    asyncio.get_running_loop().call_soon(functools.partial(print, "ready", flush=True))
    await asyncio.Event().wait()

run(waiting_for_an_ack_that_never_comes())
"""


def test_sigusr1_writes_every_thread_and_every_task_to_the_log(tmp_path) -> None:
    """A process that stopped making progress says where: its threads (from C) and then the
    coroutine each asyncio task awaits in (what the reliability suite's failed scenarios
    write to their processes' logs before stopping them)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    log, script = tmp_path / "stuck.log", tmp_path / "stuck.py"
    script.write_text(STUCK)
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                stderr=err, env={**os.environ, "SWITCHYARD_EVENT_LOOP": "asyncio",
                                                 "PYTHONPATH": str(Path(__file__).parents[2])})
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            proc.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while "Event().wait()" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proc.poll() is None  # the dump does not stop the process
        finally:
            proc.kill()
            proc.wait(10)
    text = log.read_text()
    assert "Current thread" in text or "Thread 0x" in text  # faulthandler's thread stacks
    assert "stack dump: 1 asyncio task(s)" in text
    assert "waiting_for_an_ack_that_never_comes" in text and "Event().wait()" in text
