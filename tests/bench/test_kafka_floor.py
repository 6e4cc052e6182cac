"""The round trip's floor (bench/kafka_floor.py) on the real broker, and how the pipeline
benchmark reports it."""

from __future__ import annotations

import pytest

from bench.kafka_floor import HOPS, kafka_floor
from bench.pipeline import floor_sentence


@pytest.mark.kafka
def test_every_record_comes_back_over_the_four_relayed_hops(broker, monkeypatch) -> None:
    monkeypatch.setattr("bench.kafka_floor.BROKER", broker)
    floor = kafka_floor(rate_per_s=40.0, seconds=1.0)
    assert floor["hops"] == HOPS == 4
    assert floor["received"] == floor["sent"] == 40
    trip = floor["round_trip_ms"]
    assert 0.0 < trip["p50"] <= trip["p99"]
    assert floor["relay_processes"] is False


@pytest.mark.kafka
def test_the_relays_can_run_as_processes_of_their_own(broker, monkeypatch) -> None:
    monkeypatch.setattr("bench.kafka_floor.BROKER", broker)
    floor = kafka_floor(rate_per_s=40.0, seconds=1.0, processes=True)
    assert floor["relay_processes"] is True
    assert floor["received"] == floor["sent"] == 40


def test_the_report_states_the_round_trip_over_its_floor() -> None:
    decide = {"floor": {"rate_per_s": 25.0, "sent": 750, "received": 750, "hops": 4,
                        "round_trip_ms": {"p50": 8.0, "p99": 20.0}},
              "loads": {"25": {"kafka_overhead_ms": {"p50": 16.0, "p99": 50.0}}}}
    text = floor_sentence(decide)
    assert "p50 8.0 ms, p99 20.0 ms" in text
    assert "2.00× that at p50 and 2.50× at p99" in text
    assert "at or below this floor" in text
    decide["floor_processes"] = {"rate_per_s": 25.0, "sent": 750, "received": 749, "hops": 4,
                                 "round_trip_ms": {"p50": 10.0, "p99": 25.0}}
    text = floor_sentence(decide)
    assert "749/750 records, p50 10.0 ms, p99 25.0 ms with each relay in a process" in text
    assert "2.00× that at p50 and 2.50× at p99 of the first; 1.60× that at p50" in text
    decide["floor"]["round_trip_ms"] = {"p50": 4.0, "p99": 9.0}
    text = floor_sentence(decide)
    assert "at or below the floor with a process per hop" in text
    del decide["floor_processes"]
    assert "floor on this" not in floor_sentence(decide)
    assert "process per hop" not in floor_sentence(decide)
    assert floor_sentence({"loads": {}}) == ""
