"""Honest isolation (runtimes/affinity.py): --threads N means N cores at most, for every runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runtimes.affinity import choose_cpus, format_cpus, least_busy, parse_cpus

ALLOWED = tuple(sorted(os.sched_getaffinity(0)))
multicore = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two or more cores to show a limit")


def test_parse_and_format_cpu_lists() -> None:
    assert parse_cpus("2") == (2,)
    assert parse_cpus("0-3,6") == (0, 1, 2, 3, 6)
    assert parse_cpus(" 5, 1-2 ,2") == (1, 2, 5)
    assert format_cpus((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert format_cpus(parse_cpus("3,0-1")) == "0-1,3"


@pytest.mark.parametrize("spec", ["", "a", "1,,2", "3-1", "-1", "1-x"])
def test_malformed_cpu_lists_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="cpu list"):
        parse_cpus(spec)


def test_choose_refuses_cores_outside_the_process_and_too_few_cores() -> None:
    with pytest.raises(ValueError, match="cpu 7 not available"):
        choose_cpus(None, "0,7", allowed=(0, 1))
    with pytest.raises(ValueError, match="2 threads asked for on 1 cpu"):
        choose_cpus(2, "1", allowed=(0, 1))
    with pytest.raises(ValueError, match="only 2 cpu"):
        choose_cpus(3, None, allowed=(0, 1))
    with pytest.raises(ValueError, match="threads must be >= 1"):
        choose_cpus(0, None, allowed=(0, 1))
    assert choose_cpus(None, None, allowed=(0, 1)) is None  # neither option: unpinned
    assert choose_cpus(None, "1", allowed=(0, 1)) == (1,)


def test_least_busy_takes_the_idle_cores_and_spreads_ties() -> None:
    assert least_busy((0, 1, 2, 3), 2, load=[90.0, 5.0, 80.0, 10.0], seed=0) == (1, 3)
    # Equal loads: executors with different pids start on different cores.
    picks = {least_busy((0, 1, 2, 3), 1, load=[3.0, 4.0, 2.0, 1.0], seed=pid)
             for pid in range(4)}
    assert picks == {(0,), (1,), (2,), (3,)}


PROBE = """
import json, os, sys, time
from runtimes.affinity import isolate
threads, pinned = isolate(1, sys.argv[2])
from models.ops import Variant, make_inputs, parse_op
from runtimes import get_runtime
rt = get_runtime(sys.argv[1], "cpu", threads=threads)
spec = parse_op({"kind": "matmul", "m": 1024, "k": 1024, "n": 1024})
inputs = make_inputs(spec, 0)
rt.execute(spec, Variant("fp32", "eager"), inputs)  # warm-up (and XLA's compile)
wall, cpu = time.perf_counter(), time.process_time()
for _ in range(12):
    rt.execute(spec, Variant("fp32", "eager"), inputs)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
masks = {tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")}
print(json.dumps({"ratio": cpu / wall, "masks": sorted(masks), "threads": threads}))
"""


def run_probe(code: str, runtime: str) -> tuple[int, dict]:
    """Run ``code`` for ``runtime`` in a fresh process pinned to the last core this test
    process may use now (without the BLAS thread variables); (that core, its JSON line)."""
    cpu = max(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", code, runtime, str(cpu)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return cpu, json.loads(done.stdout.strip().splitlines()[-1])


@multicore
@pytest.mark.parametrize("runtime", ["numpy", "torch", "jax"])
def test_one_thread_uses_one_core_at_most(runtime: str) -> None:
    """CPU time ÷ wall time of a 1024³ matmul stays at one core with --threads 1, for every
    runtime (JAX's XLA flags alone left it at ~1.7 on two cores), and every thread of the
    process carries the one-core mask."""
    cpu, probe = run_probe(PROBE, runtime)
    assert probe["masks"] == [[cpu]]
    assert probe["threads"] == 1
    assert probe["ratio"] <= 1.1, probe


CPU_TIME_PROBE = """
import json, os, subprocess, sys, time
from runtimes.affinity import isolate
isolate(1, sys.argv[2])
from models.ops import Variant, make_inputs, parse_op
from runtimes import get_runtime
rt = get_runtime(sys.argv[1], "cpu")
spec = parse_op({"kind": "matmul", "m": 768, "k": 768, "n": 768})
inputs = make_inputs(spec, 0)
variant = Variant("fp32", "eager")
rt.execute(spec, variant, inputs)  # warm-up

def ratios():
    out = []
    for _ in range(7):
        run = rt.execute(spec, variant, inputs)
        out.append(run.cpu_ms / run.exec_ms)
    return sorted(out)[3]

alone = ratios()
spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
os.sched_setaffinity(spinner.pid, os.sched_getaffinity(0))
time.sleep(0.2)
shared = ratios()
spinner.kill()
print(json.dumps({"alone": alone, "shared": shared}))
"""


@pytest.mark.parametrize("runtime", ["numpy", "torch", "jax"])
def test_cpu_time_is_what_the_op_had_of_a_shared_core(runtime: str) -> None:
    """An execution on a CPU reports the process's CPU time (``cpu_ms``): at most the wall
    time on its one core, and about half of it while another process spins on that core (the
    wall time doubles, the CPU time does not)."""
    _, probe = run_probe(CPU_TIME_PROBE, runtime)
    assert 0.0 < probe["alone"] <= 1.1, probe
    assert probe["shared"] < 0.8, probe


def test_simulated_executions_report_no_cpu_time_and_cpu_runtimes_do() -> None:
    from models.ops import Variant, make_inputs, parse_op
    from runtimes import get_runtime

    spec = parse_op({"kind": "matmul", "m": 64, "k": 64, "n": 64})
    sim = get_runtime("sim", "h100")
    assert not sim.measures_cpu
    assert sim.execute(spec, Variant("fp32", "eager"), make_inputs(spec, 0)).cpu_ms is None
    numpy_rt = get_runtime("numpy", "cpu")
    assert numpy_rt.measures_cpu
    assert numpy_rt.execute(spec, Variant("fp32", "eager"), make_inputs(spec, 0)).cpu_ms is not None
