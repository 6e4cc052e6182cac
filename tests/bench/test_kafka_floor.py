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


def test_the_report_states_the_round_trip_over_its_floor() -> None:
    decide = {"floor": {"rate_per_s": 25.0, "sent": 750, "received": 750, "hops": 4,
                        "round_trip_ms": {"p50": 8.0, "p99": 20.0}},
              "loads": {"25": {"kafka_overhead_ms": {"p50": 16.0, "p99": 50.0}}}}
    text = floor_sentence(decide)
    assert "p50 8.0 ms, p99 20.0 ms" in text
    assert "2.00× that at p50 and 2.50× at p99" in text
    assert "at or below this floor" in text
    decide["floor"]["round_trip_ms"] = {"p50": 4.0, "p99": 9.0}
    assert "this floor" not in floor_sentence(decide)
    assert floor_sentence({"loads": {}}) == ""
