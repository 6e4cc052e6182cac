"""How long an executor held a workload, from its outcome (agents/complete.py::service_ms):
what a class's pace (models/backlog.py) compares with the time it was charged."""

from __future__ import annotations

import pytest

from agents.complete import Outcome, check_outcome, service_ms


def outcome(**fields: object) -> Outcome:
    base = {"id": "w", "status": "ok", "device_id": "d", "device_class": "c",
            "variant": {"precision": "fp32", "mode": "eager"}, "latency_ms": 10.0,
            "queue_ms": 40.0}
    return check_outcome({**base, **fields})


def test_service_time_is_taken_from_the_outcome_timestamps() -> None:
    # Decided at 1,000; taken off the queue 40 ms later; finished at 1,100: held 60 ms, of
    # which 10 ms were the execution (the rest: inputs, checksum).
    assert service_ms(outcome(decided_at_ms=1_000, finished_at_ms=1_100)) == 60.0


def test_the_executors_monotonic_hold_comes_before_its_whole_millisecond_timestamps() -> None:
    """A 0.4 ms hold whose timestamps read 0 ms apart (handling below the execution: dropped)
    or 1 ms apart (2.5x too long) is 0.4 ms; a batched call's hold is shared out."""
    assert service_ms(outcome(decided_at_ms=1_000, finished_at_ms=1_040, held_ms=0.4,
                              latency_ms=0.3)) == 0.4
    assert service_ms(outcome(decided_at_ms=1_000, finished_at_ms=1_100, held_ms=30.0,
                              batch_size=4, latency_ms=20.0)) == 7.5
    # From an older executor (no hold) or a hold of nothing: the timestamps, as before.
    assert service_ms(outcome(decided_at_ms=1_000, finished_at_ms=1_100)) == 60.0
    assert service_ms(outcome(decided_at_ms=1_000, finished_at_ms=1_100, held_ms=0.0)) == 60.0
    with pytest.raises(ValueError, match="held_ms"):
        outcome(held_ms="fast")


def test_without_timestamps_it_is_the_execution_plus_setup() -> None:
    assert service_ms(outcome()) == 10.0
    assert service_ms(outcome(compile_ms=5.0)) == 15.0
    # setup_ms (build and warm-up) where the executor reports it: compile_ms is part of it.
    assert service_ms(outcome(compile_ms=5.0, setup_ms=8.0)) == 18.0
    # A clock that disagrees (finished before it started): the measured execution instead.
    assert service_ms(outcome(decided_at_ms=1_000, finished_at_ms=1_020, compile_ms=1.0)) == 11.0


def test_a_batched_workload_is_charged_its_share_of_the_call() -> None:
    """Four workloads held together for 60 ms each took 15 ms of the class's time, so the
    backlog's pace sees a class that batches drain its queue faster."""
    from models.backlog import Backlog

    batched = outcome(decided_at_ms=1_000, finished_at_ms=1_100, batch_size=4, latency_ms=40.0)
    assert service_ms(batched) == 15.0
    assert service_ms(outcome(batch_size=4, latency_ms=40.0)) == 10.0
    backlog = Backlog()
    backlog.add("torch-cpu-x86", 4 * 20.0, 4)  # four workloads predicted 20 ms each
    for _ in range(4):
        backlog.observe("torch-cpu-x86", 20.0, service_ms(batched))
    assert backlog.pace("torch-cpu-x86") < 1.0
    assert backlog.ms("torch-cpu-x86") < 80.0


def test_handling_is_learned_from_outcomes_that_set_nothing_up() -> None:
    """What the executor held a workload for beyond its execution is learned per class
    against the bytes the workload moved; an outcome that compiled or set up a cold shape (its
    warm-up run is outside the execution) and an entry without its bytes (an older worker's) teach nothing."""
    from agents import complete, state
    from models.handling import Handling

    saved = state.handling
    state.handling = Handling()
    try:
        entry = {"device_class": "c", "io_bytes": 3 * 1024 * 1024}
        done = outcome(decided_at_ms=1_000, finished_at_ms=1_100)  # held 60, executed 10
        complete.learn_handling(done, entry, service_ms(done))
        assert state.handling.ms("c", 3 * 1024 * 1024) == pytest.approx(50.0, rel=0.05)
        compiled = outcome(decided_at_ms=1_000, finished_at_ms=1_500, compile_ms=300.0)
        complete.learn_handling(compiled, entry, service_ms(compiled))
        # An eager warm-up: no compilation, but a setup the handling must not learn.
        warmed = outcome(decided_at_ms=1_000, finished_at_ms=1_400, setup_ms=250.0)
        complete.learn_handling(warmed, entry, service_ms(warmed))
        complete.learn_handling(done, {"device_class": "c"}, 999.0)
        assert state.handling.by_class()["c"]["rows"] == 1
    finally:
        state.handling = saved


def test_handling_is_learned_per_precision() -> None:
    """A bf16 workload's inputs are converted and its output converted back: its handling is
    learned apart from the class's fp32 handling, which it would otherwise raise."""
    from agents import complete, state
    from models.handling import Handling, handling_key

    saved = state.handling
    state.handling = Handling()
    try:
        nbytes = 3 * 1024 * 1024
        fp32 = {"device_class": "c", "io_bytes": nbytes, "variant": {"precision": "fp32"}}
        bf16 = {"device_class": "c", "io_bytes": nbytes, "variant": {"precision": "bf16"}}
        quick = outcome(decided_at_ms=1_000, finished_at_ms=1_052)  # held 12: 2 of handling
        slow = outcome(decided_at_ms=1_000, finished_at_ms=1_070)  # held 30: 20 of handling
        for _ in range(12):
            complete.learn_handling(quick, fp32, service_ms(quick))
            complete.learn_handling(slow, bf16, service_ms(slow))
        assert state.handling.ms(handling_key("c", "fp32"), nbytes) == pytest.approx(2.0, rel=0.1)
        assert state.handling.ms(handling_key("c", "bf16"), nbytes) == pytest.approx(20.0, rel=0.1)
        assert set(state.handling.by_class()) == {"c", "c/bf16"}
    finally:
        state.handling = saved


def test_each_outcome_settles_what_its_route_cost_the_policy_budget(monkeypatch) -> None:
    """The complete stage tells the decide stage's policy (``state.settle``) what every
    outcome of the class it was routed to held its executor for — failed ones too (they held
    the core) — and nothing for an outcome from another class or a duplicate."""
    import asyncio

    from agents import complete, state

    settled: list[tuple[str, float]] = []
    written: dict[bytes, bytes] = {}

    async def write_through(app, table, key, value):  # noqa: ANN001, ANN202
        written[key] = value
        return None

    class Sent:
        def add(self, delivery: object) -> None:
            return None

    entries = {"w1": {"device_class": "c", "workload": {}, "charged_ms": 20.0},
               "w2": {"device_class": "c", "workload": {}, "charged_ms": 20.0},
               "w3": {"device_class": "other", "workload": {}, "charged_ms": 20.0}}
    monkeypatch.setattr(complete, "completed", written)
    monkeypatch.setattr(complete, "write_through", write_through)
    monkeypatch.setattr(complete, "results_sent", Sent())
    monkeypatch.setattr(state, "settle", lambda wid, ms: settled.append((wid, ms)))
    monkeypatch.setattr(state, "book", type("Book", (), {"get": staticmethod(entries.get)}))
    monkeypatch.setattr(state, "close_inflight", lambda wid, now=None: None)
    monkeypatch.setattr(complete, "learn_handling", lambda *args: None)
    monkeypatch.setattr(state.backlog, "observe", lambda *args: None)

    async def run() -> None:
        await complete.complete_outcome(outcome(id="w1", held_ms=30.0))
        await complete.complete_outcome(outcome(id="w2", held_ms=250.0, status="error",
                                                error="boom"))
        await complete.complete_outcome(outcome(id="w3", held_ms=5.0))
        await complete.complete_outcome(outcome(id="w1", held_ms=31.0))  # a duplicate

    asyncio.run(run())
    assert settled == [("w1", 30.0), ("w2", 250.0)]
    assert set(written) == {b"w1", b"w2", b"w3"}
