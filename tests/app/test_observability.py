"""Counters and gauges, and their Prometheus text exposition (checked by Prometheus' parser)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import observability


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    observability.reset()
    yield
    observability.reset()


def families() -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(observability.render_prometheus())}


def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(observability.render_prometheus()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_counters_add_up_per_label_set_and_in_total() -> None:
    observability.inc("switchyard_results_total", device_class="a", status="ok")
    observability.inc("switchyard_results_total", 2, device_class="a", status="ok")
    observability.inc("switchyard_results_total", device_class="b", status="error")
    assert observability.counter_value("switchyard_results_total", device_class="a",
                                       status="ok") == 3
    assert observability.counter_value("switchyard_results_total") == 4
    assert observability.counter_by("switchyard_results_total", "status") == {"ok": 3, "error": 1}
    parsed = samples()
    assert parsed[("switchyard_results_total", (("device_class", "a"), ("status", "ok")))] == 3
    assert parsed[("switchyard_results_total", (("device_class", "b"), ("status", "error")))] == 1


def test_labels_in_another_order_are_the_same_series_and_the_key_cache_is_bounded() -> None:
    """``inc`` remembers each checked key as it was asked for (name and labels in call order):
    another order still counts to one series, and the memo is cleared at its bound."""
    observability.inc("switchyard_results_total", device_class="a", status="ok")
    observability.inc("switchyard_results_total", status="ok", device_class="a")
    assert samples()[("switchyard_results_total", (("device_class", "a"), ("status", "ok")))] == 2
    for i in range(observability._KEY_CACHE_SIZE + 10):
        observability.inc("switchyard_results_total", device_class=f"c{i}", status="ok")
    assert len(observability._key_cache) <= observability._KEY_CACHE_SIZE
    assert observability.counter_value("switchyard_results_total", device_class="c0",
                                       status="ok") == 1
    with pytest.raises(ValueError, match="label name"):  # still checked when not remembered
        observability.inc("switchyard_results_total", **{"bad-label": "x"})


def test_exposition_types_and_help_once_per_metric() -> None:
    observability.inc("switchyard_decisions_total", device_class="a", policy="p", reason="explore")
    observability.inc("switchyard_decisions_total", device_class="b", policy="p", reason="exploit")
    observability.set_gauge("switchyard_backlog_seconds", 1.5, device_class="a")
    text = observability.render_prometheus()
    assert text.count("# TYPE switchyard_decisions_total counter") == 1
    assert text.count("# HELP switchyard_decisions_total ") == 1
    assert "# TYPE switchyard_backlog_seconds gauge" in text
    parsed = families()
    # The parser strips _total from a counter family's name; the samples keep it.
    assert parsed["switchyard_decisions"].type == "counter"  # type: ignore[attr-defined]
    assert parsed["switchyard_backlog_seconds"].type == "gauge"  # type: ignore[attr-defined]
    assert text.endswith("\n")


def test_label_values_are_escaped() -> None:
    observability.inc("switchyard_deadletters_total", stage='we"ird\\stage\nx')
    parsed = samples()
    assert parsed[("switchyard_deadletters_total", (("stage", 'we"ird\\stage\nx'),))] == 1


def test_special_values_use_the_formats_spelling() -> None:
    observability.set_gauge("switchyard_model_error_ratio", math.inf, device_class="a")
    observability.set_gauge("switchyard_model_error_ratio", math.nan, device_class="b")
    text = observability.render_prometheus()
    assert 'switchyard_model_error_ratio{device_class="a"} +Inf' in text
    assert 'switchyard_model_error_ratio{device_class="b"} NaN' in text
    parsed = samples()
    assert parsed[("switchyard_model_error_ratio", (("device_class", "a"),))] == math.inf


def test_replace_gauge_drops_series_that_are_gone() -> None:
    observability.set_gauge("switchyard_live_devices", 2, device_class="gone")
    observability.replace_gauge("switchyard_live_devices", {(("device_class", "here"),): 1.0})
    assert observability.gauge_value("switchyard_live_devices", device_class="gone") is None
    assert observability.gauge_value("switchyard_live_devices", device_class="here") == 1.0
    assert 'device_class="gone"' not in observability.render_prometheus()


@pytest.mark.parametrize("name", ["9starts_with_digit", "has-dash", "has space", ""])
def test_invalid_metric_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="metric name"):
        observability.inc(name)


def test_invalid_label_names_and_negative_counter_steps_are_refused() -> None:
    with pytest.raises(ValueError, match="label name"):
        observability.set_gauge("switchyard_live_devices", 1, **{"__reserved": "x"})
    with pytest.raises(ValueError, match="cannot decrease"):
        observability.inc("switchyard_results_total", -1)


def test_every_documented_metric_follows_the_naming_conventions() -> None:
    for name in observability.HELP:
        assert name.startswith("switchyard_")
        assert name == name.lower()
        # Base units only: milliseconds are not a Prometheus unit.
        assert not name.endswith("_ms")
    counters = [n for n in observability.HELP if n.endswith("_total")]
    assert "switchyard_deadletters_total" in counters
