"""An executor's handling around the execution, learned per class (models/handling.py)."""

from __future__ import annotations

import pytest

from models.handling import CAP_AFTER_ROWS, Handling, handling_ms
from models.transfer import update_transfer

MB = 1_000_000  # as models/transfer.py counts them


def test_handling_is_what_the_executor_held_beyond_execution_compile_and_transfer() -> None:
    assert handling_ms(60.0, 10.0, None, None) == 50.0
    assert handling_ms(60.0, 10.0, 5.0, 15.0) == 30.0
    # Clocks that disagree are not a measurement.
    assert handling_ms(8.0, 10.0, None, None) is None
    assert handling_ms(float("nan"), 10.0, None, None) is None


def test_a_class_learns_its_handling_as_a_line_in_the_bytes_moved() -> None:
    handling = Handling()
    assert handling.ms("torch-cpu-x", 10 * MB) == 0.0  # nothing measured anywhere
    for mb in (1, 4, 16, 64, 2, 32) * 5:
        handling.observe("torch-cpu-x", mb * MB, 2.0 + 1.5 * mb)
    assert handling.ms("torch-cpu-x", 10 * MB) == pytest.approx(17.0, rel=0.02)
    assert handling.ms("torch-cpu-x", 0) == pytest.approx(2.0, abs=0.3)
    fit = handling.by_class()["torch-cpu-x"]
    assert fit["ms_per_mb"] == pytest.approx(1.5, rel=0.02) and fit["rows"] == 30


def test_a_class_not_measured_yet_takes_the_least_of_the_measured_ones() -> None:
    """Making inputs and checksums is mostly the same work on every runtime: a class never
    measured is not taken for free beside classes whose handling is known."""
    handling = Handling()
    for mb in (1, 8, 32) * 4:
        handling.observe("torch-cpu-x", mb * MB, 3.0 * mb)
        handling.observe("jax-cpu-x", mb * MB, 4.0 * mb)
    assert handling.ms("numpy-cpu-x", 10 * MB) == pytest.approx(
        handling.ms("torch-cpu-x", 10 * MB))
    assert handling.ms("numpy-cpu-x", 10 * MB) == pytest.approx(30.0, rel=0.05)


def test_the_line_follows_a_class_whose_handling_changes() -> None:
    handling = Handling()
    for _ in range(100):
        handling.observe("c", 10 * MB, 10.0)
    for _ in range(200):
        handling.observe("c", 10 * MB, 40.0)
    assert handling.ms("c", 10 * MB) == pytest.approx(40.0, rel=0.1)


def test_one_descheduled_row_does_not_set_the_class_estimate() -> None:
    """A simulated H100 handles its workloads in ~0.2 ms; once, on a busy machine, its
    executor was off the core for 40 ms with a 3 MB workload in hand. Uncapped, that row made
    the class's handling of 3 MB 4.6 ms — more than a slower class's whole completion — and
    no more rows of that size would come to move it back."""
    handling = Handling()
    sizes = (0.004, 0.064, 1.0, 3.0, 0.016) * 12
    for mb in sizes:
        handling.observe("sim-h100", mb * MB, 0.2 + 0.05 * mb)
    clean = handling.ms("sim-h100", 3.1 * MB)
    assert clean == pytest.approx(0.355, rel=0.05)
    handling.observe("sim-h100", 3.1 * MB, 40.0)
    # The row counts as at most 4x the estimate + 2 ms: the estimate stays under 1 ms.
    assert clean <= handling.ms("sim-h100", 3.1 * MB) < 1.0
    # Without the cap (as before): 4.6 ms.
    uncapped = Handling()
    for mb in sizes:
        uncapped._sums["sim-h100"] = update_transfer(uncapped._sums.get("sim-h100"),
                                                     [(mb * MB, 0.2 + 0.05 * mb)])
    uncapped._sums["sim-h100"] = update_transfer(uncapped._sums["sim-h100"],
                                                 [(3.1 * MB, 40.0)])
    assert uncapped.ms("sim-h100", 3.1 * MB) > 4.0


def test_a_real_change_gets_through_the_cap_within_a_few_rows() -> None:
    handling = Handling()
    for _ in range(20):
        handling.observe("torch-cpu-x", 0.064 * MB, 1.0)
    # Its first large workloads: 76 ms of handling at 32 MB (making and checksumming them).
    seen = []
    for _ in range(6):
        handling.observe("torch-cpu-x", 32 * MB, 76.0)
        seen.append(handling.ms("torch-cpu-x", 32 * MB))
    assert seen == sorted(seen) and seen[0] < 20.0  # capped, and rising every row
    assert seen[-1] > 50.0



def test_a_class_with_few_rows_is_charged_at_most_the_least_measured_class() -> None:
    """CI, 2026-12-07: a simulated H100's first rows read 142 ms of handling (its executor
    off the core on a loaded machine) beside a simulated CPU core's 0.75 ms. Taken as the
    class's estimate, the router sent it nothing more and it never came back."""
    handling = Handling()
    for _ in range(3):
        handling.observe("sim-cpu-core", 0.05 * MB, 0.75)
    handling.observe("sim-h100", 0.05 * MB, 142.0)
    assert handling.ms("sim-h100", 0.05 * MB) == pytest.approx(0.75, rel=0.01)
    # The only class measured has nothing to be compared with: its rows count.
    alone = Handling()
    alone.observe("sim-h100", 0.05 * MB, 142.0)
    assert alone.ms("sim-h100", 0.05 * MB) == pytest.approx(142.0, rel=0.01)


def test_a_stall_among_a_class_first_rows_does_not_stay_in_its_estimate() -> None:
    handling = Handling()
    handling.observe("sim-cpu-core", 0.05 * MB, 0.75)
    handling.observe("sim-h100", 0.05 * MB, 142.0)
    for _ in range(CAP_AFTER_ROWS - 1):
        handling.observe("sim-h100", 0.05 * MB, 0.5)
    # Its own line now, the stall capped against it: near 0.5 ms, not 142 / 10.
    assert 0.5 <= handling.ms("sim-h100", 0.05 * MB) < 1.5
    assert handling.by_class()["sim-h100"]["rows"] == CAP_AFTER_ROWS


def test_a_class_truly_slower_to_handle_has_its_own_estimate_after_its_first_rows() -> None:
    """Erring low draws the rows that correct it: a live runtime's ~44 ms of handling beside
    simulated classes that handle in under 1 ms, sizes from 1 to 32 MB."""
    handling = Handling()
    for _ in range(20):
        handling.observe("sim-cpu-core", 1 * MB, 0.75)
    for i in range(CAP_AFTER_ROWS):
        assert handling.ms("torch-cpu-x", 1 * MB) <= 0.76
        mb = (1, 8, 32)[i % 3]
        handling.observe("torch-cpu-x", mb * MB, 40.0 + 1.5 * mb)
    assert handling.ms("torch-cpu-x", 1 * MB) == pytest.approx(41.5, rel=0.05)
    assert handling.ms("torch-cpu-x", 32 * MB) == pytest.approx(88.0, rel=0.05)


def test_small_rows_set_the_intercept_and_large_rows_the_slope() -> None:
    """Handling whose noise grows with the size (a 64 MB row's moves by ±20 %, tens of ms)
    and that is not quite a line (32 MB takes more than half of 64 MB's): weighed alike, the
    few large rows would set the intercept too (here 1.7 ms at 10 KB, 5x the truth). The
    line still follows the large ones."""
    from models.handling import row_weight

    mb = 1024 * 1024
    true = {10_000: 0.3, 50_000: 0.35, 200_000: 0.6, 3 * mb: 5.0, 32 * mb: 60.0, 64 * mb: 96.0}
    noise = [1.2, 0.8, 0.85, 1.15]
    handling = Handling()
    for i in range(60):
        nbytes = list(true)[i % len(true)]
        handling.observe("c", nbytes, true[nbytes] * noise[i % len(noise)])
    assert handling.ms("c", 10_000) == pytest.approx(0.3, abs=0.2)
    assert handling.ms("c", 200_000) == pytest.approx(0.6, abs=0.3)
    assert handling.ms("c", 64 * mb) == pytest.approx(96.0, rel=0.2)
    assert handling.ms("c", 32 * mb) == pytest.approx(60.0, rel=0.2)
    # The weight: alike below a megabyte or so, falling as the square of the size above it.
    assert row_weight(0.01) > 0.95 and row_weight(63.0) < 1e-3


def test_a_size_measured_twice_is_estimated_from_its_own_rows() -> None:
    """torch bf16 on the live bf16 set (AMD EPYC, 2026-12-07): ~2 ms of handling for small
    workloads, ~6 at 12 MB, and 68 ms for a 4096 x 2048 softmax (64 MB moved, converted to bf16
    and back out of the cache), where a line through them all read about half that."""
    handling = Handling()
    key = "torch-cpu-x/bf16"
    for _ in range(10):
        for mb, ms in ((0.05, 2.0), (1.0, 3.0), (12.0, 6.0)):
            handling.observe(key, mb * MB, ms)
    line = handling.ms(key, 64 * MB)
    handling.observe(key, 64 * MB, 70.0)
    # One row of a size is not trusted alone (it may be a stall): the line still.
    assert handling.ms(key, 64 * MB) < 0.6 * 68.0
    handling.observe(key, 64 * MB, 68.0)
    assert handling.ms(key, 64 * MB) == pytest.approx(68.0)
    assert handling.ms(key, 12 * MB) == pytest.approx(6.0)
    # Other sizes keep the line.
    assert handling.ms(key, 32 * MB) < 0.6 * 68.0 and line < 0.6 * 68.0
    # A stall among the latest rows of a size does not raise it (the least of them).
    handling.observe(key, 63 * MB, 400.0)
    assert handling.ms(key, 64 * MB) == pytest.approx(68.0)


def test_a_new_class_is_charged_the_least_of_the_classes_that_measured_as_large() -> None:
    """NumPy's handling learned from 64³ matmuls alone extrapolates to 3 ms at 64 MB; torch
    measured 35 ms there. A runtime not measured yet (JAX) is charged the least of those who
    measured that size, not an extrapolation from small workloads."""
    handling = Handling()
    for _ in range(20):
        handling.observe("numpy-cpu-x", 0.05 * MB, 0.6)
        handling.observe("torch-cpu-x", 0.05 * MB, 0.8)
        handling.observe("torch-cpu-x", 64 * MB, 35.0)
    assert handling.ms("numpy-cpu-x", 64 * MB) < 5.0  # its own line, from small rows
    assert handling.ms("jax-cpu-x", 64 * MB) == pytest.approx(35.0)
    assert handling.ms("jax-cpu-x", 0.05 * MB) == pytest.approx(0.6, rel=0.05)
    # No class measured a workload as large: the least of all.
    assert handling.ms("jax-cpu-x", 512 * MB) == pytest.approx(
        min(handling.ms("numpy-cpu-x", 512 * MB), handling.ms("torch-cpu-x", 512 * MB)))
