"""Shared fixtures: the real broker, unique names, and processes started once and reused."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from app.kafka_local import broker_ready

BROKER = os.environ.get("SWITCHYARD_BROKER", "127.0.0.1:9092")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_configure(config: pytest.Config) -> None:
    """Build the test process's worker before any test module imports a stage (app.main:
    the stages bind to the worker a process builds): in-memory tables in a temporary data
    directory, so no test in this process writes RocksDB files or reads the developer's.
    Workers the tests start as processes build their own from the environment they are given."""
    import tempfile
    from pathlib import Path

    from app.main import build
    from app.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="switchyard-tests-"))
    config.add_cleanup(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    build(Settings(store="memory://", data_dir=data_dir))


@pytest.fixture(scope="session")
def broker() -> str:
    """The real Kafka broker's bootstrap address.

    Tests that need Kafka must run in CI: there a missing broker fails the test; on a
    developer's machine it skips with the command that starts one.
    """
    if not broker_ready(BROKER, 5.0):
        message = f"no Kafka broker answers at {BROKER}; start one with `switchyard kafka start`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return BROKER


def require_tool(*names: str, install: str) -> str:
    """The path of the first of ``names`` on PATH. Missing, it fails the test in CI (where
    .ci/run installs it) and skips it elsewhere, saying how to get it."""
    for name in names:
        if path := shutil.which(name):
            return path
    message = f"{' or '.join(names)} is not installed ({install})"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def unique() -> str:
    """A short unique suffix for topic names and consumer groups of one test."""
    return uuid.uuid4().hex[:10]
