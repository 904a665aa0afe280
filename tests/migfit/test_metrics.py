"""migfit.metrics: the servers' registry drops `_created` samples (its own only); build info."""

from __future__ import annotations

import platform

import prometheus_client

import migfit
from migfit import metrics


def _exposition(registry: prometheus_client.CollectorRegistry) -> str:
    counter = prometheus_client.Counter("t_calls", "calls", ["verb"], registry=registry)
    counter.labels("filter").inc()
    histogram = prometheus_client.Histogram("t_duration_seconds", "time", registry=registry)
    histogram.observe(0.01)
    return prometheus_client.generate_latest(registry).decode()


def test_no_created_samples_and_the_rest_unchanged() -> None:
    text = _exposition(metrics.registry())
    assert "_created" not in text
    assert 't_calls_total{verb="filter"} 1.0' in text
    assert "t_duration_seconds_count 1.0" in text and "t_duration_seconds_sum 0.01" in text


def test_other_registries_of_the_process_keep_theirs() -> None:
    # Not prometheus_client's process-wide switch: a library's own registry is untouched.
    assert 't_calls_created{verb="filter"}' in _exposition(prometheus_client.CollectorRegistry())


def test_build_info_names_the_version_and_python() -> None:
    registry = metrics.registry()
    assert registry.get_sample_value(
        "migfit_build_info",
        {"version": migfit.__version__, "python": platform.python_version()}) == 1.0
