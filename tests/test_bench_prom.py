"""bench/prom.py: the samples of a real exposition, the buckets between two scrapes, and
quantiles from buckets as PromQL's ``histogram_quantile`` computes them."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from bench import prom


def exposition() -> tuple[CollectorRegistry, Histogram, Counter]:
    registry = CollectorRegistry()
    histogram = Histogram("eps_t_seconds", "t", ["witness"], buckets=(0.01, 0.02, 0.05), registry=registry)
    counter = Counter("eps_t_events", "e", ["witness", "kind"], registry=registry)
    return registry, histogram, counter


def test_buckets_are_the_observations_between_two_scrapes_summed_over_label_sets() -> None:
    registry, histogram, counter = exposition()
    histogram.labels("w1").observe(0.001)
    counter.labels("w1", "timeout").inc()
    before = prom.parse(generate_latest(registry).decode())
    for value in (0.015, 0.015, 0.03):
        histogram.labels("w1").observe(value)
    histogram.labels("w2").observe(0.5)
    counter.labels("w2", "409").inc(2)
    after = prom.parse(generate_latest(registry).decode())
    assert prom.buckets(before, after, "eps_t_seconds") == [(0.01, 0), (0.02, 2), (0.05, 3), (math.inf, 4)]
    assert prom.buckets(before, after, "eps_t_seconds", witness="w2") == [
        (0.01, 0), (0.02, 0), (0.05, 0), (math.inf, 1),
    ]  # fmt: skip
    assert prom.total(after, "eps_t_seconds_count") - prom.total(before, "eps_t_seconds_count") == 4
    assert prom.total(after, "eps_t_events_total", witness="w2") == 2
    assert prom.total(after, "eps_t_events_total") == 3


def test_quantile_interpolates_inside_the_bucket_it_falls_in() -> None:
    cumulative = [(0.01, 10.0), (0.02, 30.0), (0.05, 40.0), (math.inf, 40.0)]
    assert prom.quantile(cumulative, 0.25) == 0.01 * 10 / 10  # the end of the first bucket
    assert math.isclose(prom.quantile(cumulative, 0.125), 0.005)  # the first bucket starts at 0
    assert math.isclose(prom.quantile(cumulative, 0.5), 0.01 + 0.01 * (20 - 10) / 20)
    assert math.isclose(prom.quantile(cumulative, 0.99), 0.02 + 0.03 * (39.6 - 30) / 10)
    assert prom.quantile(cumulative, 1.0) == 0.05


def test_quantile_skips_empty_buckets_and_stops_at_the_largest_finite_bound() -> None:
    assert math.isclose(prom.quantile([(0.01, 0.0), (0.02, 0.0), (0.05, 4.0), (math.inf, 4.0)], 0.5), 0.035)
    assert prom.quantile([(0.01, 1.0), (0.05, 1.0), (math.inf, 10.0)], 0.99) == 0.05


def test_no_observations_is_nan() -> None:
    assert math.isnan(prom.quantile([], 0.5))
    assert math.isnan(prom.quantile([(0.01, 0.0), (math.inf, 0.0)], 0.5))
    assert math.isnan(prom.quantile([(0.01, 1.0), (math.inf, 1.0)], 1.5))
