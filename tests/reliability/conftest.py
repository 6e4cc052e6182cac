"""Fixtures of the reliability suite: the scale of each form, a work directory, and the
skipping of long forms (``@pytest.mark.slow``) unless SWITCHYARD_RELIABILITY_LONG=1.

Long forms run from ``python -m bench.reliability``, which also regenerates RELIABILITY.md.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.harness import CANARY_SECRET, Shared, new_cluster, start_executors

LONG_MODE = os.environ.get("SWITCHYARD_RELIABILITY_LONG", "") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the long forms unless the long mode was asked for."""
    if LONG_MODE:
        return
    skip = pytest.mark.skip(reason="long form: set SWITCHYARD_RELIABILITY_LONG=1 "
                                   "(or run `python -m bench.reliability`)")
    here = Path(__file__).parent
    for item in items:
        if "slow" in item.keywords and Path(str(item.fspath)).parent == here:
            item.add_marker(skip)


@pytest.fixture
def workdir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory for one scenario's process logs and worker state, removed on success.

    Outside pytest's own temporary directories, which other sessions' runs rotate away: a
    failed scenario's logs stay under SWITCHYARD_RELIABILITY_WORKDIR (/tmp/sy-reliability);
    SWITCHYARD_RELIABILITY_KEEP=1 keeps every scenario's.
    """
    base = Path(os.environ.get("SWITCHYARD_RELIABILITY_WORKDIR", "/tmp/sy-reliability"))
    name = request.node.name.replace("[", "-").replace("]", "")
    path = base / f"{name}-{time.strftime('%H%M%S')}"
    path.mkdir(parents=True, exist_ok=True)
    yield path
    keep = os.environ.get("SWITCHYARD_RELIABILITY_KEEP", "").lower() in ("1", "true", "yes")
    if not getattr(request.node, "failed", False) and not keep:
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"\nlogs kept in {path}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Remember a failure on the item, so ``workdir`` keeps the logs for a post-mortem."""
    report = yield
    if report.failed:
        item.failed = True  # type: ignore[attr-defined]
    return report



@pytest.fixture(scope="session")
def shared(broker: str) -> Iterator[Shared]:
    """A worker and two sim executors, started once for the hostile-input, security and soak
    tests. Windows are short (2 s tumbling, 6 s hopping, gone 10 s after they close) so a
    bounded soak shows them expiring."""
    base = Path(os.environ.get("SWITCHYARD_RELIABILITY_WORKDIR", "/tmp/sy-reliability"))
    workdir = base / f"shared-{time.strftime('%H%M%S')}"
    cluster = new_cluster(
        workdir, broker, SWITCHYARD_TUMBLING_WINDOW_S="2", SWITCHYARD_HOPPING_WINDOW_S="6",
        SWITCHYARD_HOPPING_STEP_S="2", SWITCHYARD_WINDOW_EXPIRES_S="10",
        SWITCHYARD_SASL_USERNAME="switchyard", SWITCHYARD_SASL_PASSWORD=CANARY_SECRET,
        SWITCHYARD_SSL_PASSWORD=CANARY_SECRET)
    with cluster:
        worker = cluster.start_worker()
        executors = start_executors(cluster, ["h100", "a100"])
        cluster.wait_ready(worker, 240)
        cluster.wait_devices([p.name for p in executors], 120)
        yield Shared(cluster, worker, executors, workdir)
    print(f"\nshared cluster logs in {workdir}")
