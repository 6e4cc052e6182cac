"""The worker is built from a settings object, explicitly (app/main.py): importing app.main
builds nothing, a stage imported before any build says what to do, and a process builds once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.main import build, built
from app.settings import Settings


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)


def test_importing_app_main_builds_nothing() -> None:
    done = run_python("import app.main\n"
                      "assert not app.main._built\n"
                      "try:\n"
                      "    app.main.app\n"
                      "except RuntimeError as exc:\n"
                      "    print(exc)\n")
    assert done.returncode == 0, done.stderr
    assert "call app.main.build(settings)" in done.stdout


def test_a_stage_imported_before_a_build_is_a_clear_error() -> None:
    done = run_python("import agents.registry")
    assert done.returncode != 0
    assert "no Switchyard worker is built in this process" in done.stderr


def test_the_stages_bind_to_the_worker_built_from_the_given_settings(tmp_path) -> None:
    done = run_python(
        "from app.main import build\n"
        "from app.settings import Settings\n"
        f"worker = build(Settings(store='memory://', data_dir={str(tmp_path)!r}, "
        "topic_namespace='built-here.'))\n"
        "from app.tables import devices\n"
        "from agents import registry\n"
        "assert devices.app is worker.app and registry.app is worker.app\n"
        "print(worker.topics.heartbeats.get_topic_name())\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "built-here.switchyard.heartbeats"


def test_a_process_builds_one_worker() -> None:
    worker = built()  # the test process's (tests/conftest.py)
    assert build(worker.settings) is worker
    with pytest.raises(RuntimeError, match="already built"):
        build(Settings(store="memory://", data_dir=worker.settings.data_dir, app_id="other"))
