"""Live sets pin their processes the same way for every policy (bench/fleets.py::live_cores)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from app.local import LocalCluster
from bench import fleets


def test_live_executors_share_the_last_core_and_the_worker_gets_the_rest() -> None:
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    worker, executors = fleets.live_cores()
    assert executors == str(allowed[-1])
    assert worker == (allowed[:-1] or allowed)
    assert executors not in {str(c) for c in worker} or len(allowed) == 1
    assert {spec.cpus for spec in fleets.LIVE_FLEET} == {executors}
    assert all(spec.threads == 1 for spec in fleets.LIVE_FLEET)


def test_a_spawned_process_runs_on_the_cores_it_was_given(tmp_path: Path) -> None:
    local = LocalCluster(workdir=tmp_path)
    ours = os.sched_getaffinity(0)
    cpu = sorted(ours)[-1]
    # A thread started by the child inherits the pin too (Faust's consumer thread would).
    code = ("import os, threading; out = []; "
            "t = threading.Thread(target=lambda: out.append(sorted(os.sched_getaffinity(0)))); "
            "t.start(); t.join(); print(sorted(os.sched_getaffinity(0)), out[0])")
    proc = local._spawn("pinned", [sys.executable, "-c", code], cpus=(cpu,))
    assert proc.popen.wait(30) == 0
    deadline = time.monotonic() + 5
    while not proc.log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.log.read_text().split("\n")[0] == f"[{cpu}] [{cpu}]"
    assert os.sched_getaffinity(0) == ours  # the pin is the child's alone
