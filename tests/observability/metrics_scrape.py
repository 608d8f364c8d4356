"""Scraping a running proxy's ``/metrics`` over HTTP and reading samples, for the metrics tests.

The exposition is parsed with prometheus-client's own parser (``text_string_to_metric_families``): a sample the
parser cannot read fails the test, as it would fail a Prometheus server.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import httpx
from prometheus_client.parser import text_string_to_metric_families


@attrs.frozen
class Scrape:
    """One scrape: every sample by (name, labels), and the family types by name."""

    samples: Mapping[tuple[str, frozenset[tuple[str, str]]], float]
    types: Mapping[str, str]

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; KeyError when the exposition has no such sample (a metric that is missing fails)."""
        key = (name, frozenset(labels.items()))
        if key not in self.samples:
            known = sorted(str(dict(found)) for sample, found in self.samples if sample == name)
            raise KeyError(f"no sample {name}{labels}; {name} has {known or 'no samples'}")
        return self.samples[key]

    def total(self, name: str) -> float:
        """The sum of a sample name over all its label sets (0 when it has none)."""
        return sum(value for (sample, _), value in self.samples.items() if sample == name)

    def labels_of(self, name: str, label: str) -> set[str]:
        return {dict(labels)[label] for sample, labels in self.samples if sample == name and label in dict(labels)}


def parse(text: str) -> Scrape:
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Scrape(samples, types)


async def get_metrics(url: str, headers: Mapping[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=None) as client:
        return await client.get(url + "/metrics", headers=dict(headers or {}))


async def scrape(url: str, headers: Mapping[str, str] | None = None) -> Scrape:
    response = await get_metrics(url, headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


__all__ = ["Scrape", "get_metrics", "parse", "scrape"]
