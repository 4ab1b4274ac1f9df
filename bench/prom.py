"""Reading a process's Prometheus metrics in the benchmark: scrape, subtract two scrapes,
and a quantile from a histogram's buckets (as PromQL's ``histogram_quantile`` computes it)."""

from __future__ import annotations

import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

# (metric sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of a text exposition, keyed by its name and labels."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return samples


def scrape(url: str) -> Samples:
    response = httpx.get(url, timeout=5)
    response.raise_for_status()
    return parse(response.text)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for (sample, pairs), value in samples.items() if sample == name and wanted <= set(pairs))


def buckets(before: Samples, after: Samples, histogram: str, **labels: str) -> list[tuple[float, float]]:
    """The cumulative buckets (upper bound, count) of ``histogram`` observed between two scrapes,
    summed over every series whose labels include ``labels``, ``+Inf`` last."""
    name = histogram + "_bucket"
    wanted = set(labels.items())
    counts: dict[float, float] = {}
    for (sample, pairs), value in after.items():
        if sample != name or not wanted <= set(pairs):
            continue
        bound = float(dict(pairs)["le"])
        counts[bound] = counts.get(bound, 0.0) + value - before.get((sample, pairs), 0.0)
    return sorted(counts.items())


def quantile(cumulative: list[tuple[float, float]], q: float) -> float:
    """The ``q`` quantile of cumulative buckets, interpolated linearly inside its bucket (the
    first bucket from 0); in the ``+Inf`` bucket, the largest finite bound. NaN with no
    observations."""
    if not cumulative or not 0 <= q <= 1:
        return math.nan
    count = cumulative[-1][1]
    if count <= 0:
        return math.nan
    rank = q * count
    lower_bound, lower_count = 0.0, 0.0
    for bound, cumulated in cumulative:
        if cumulated >= rank and cumulated > lower_count:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (cumulated - lower_count)
        lower_bound, lower_count = bound, cumulated
    return lower_bound
