"""The worker holds its BLAS pool to one thread (app/loop.py::limit_blas_threads)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_after_the_limit_every_blas_pool_has_one_thread() -> None:
    # In a child process: the limit holds for the rest of the process that sets it.
    code = (
        "import json, numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "from app.loop import limit_blas_threads\n"
        "before = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "limit_blas_threads()\n"
        "after = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "print(json.dumps([before, after]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert after and all(n == 1 for n in after), (before, after)
