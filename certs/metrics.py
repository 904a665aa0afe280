"""The certificate-expiry gauge the servers expose, read from their reloaders at scrape time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

METRIC = "migfit_certificate_expiry_timestamp_seconds"
HELP = "When the served TLS certificate expires (Unix seconds); alert well before it passes."


class HasExpiry(Protocol):
    """What the collector reads: ``reloading.CertificateReloader`` provides it."""

    def expiry_timestamp(self) -> float: ...


class CertificateExpiryCollector(Collector):
    """One sample per named server: ``migfit_certificate_expiry_timestamp_seconds{server=...}``.

    It asks each reloader at scrape time, so the value follows certificate reloads without
    anyone updating a gauge.
    """

    def __init__(self) -> None:
        self._sources: dict[str, HasExpiry] = {}

    def add(self, server: str, source: HasExpiry) -> None:
        """Report ``source``'s expiry under the label ``server`` (e.g. "webhook")."""
        self._sources[server] = source

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(METRIC, HELP, labels=["server"])
        for server, source in sorted(self._sources.items()):
            family.add_metric([server], source.expiry_timestamp())
        yield family


def register(
    registry: CollectorRegistry, *, server: str, source: HasExpiry
) -> CertificateExpiryCollector:
    """Create the collector for one server's certificate and register it with ``registry``.

    For several servers in one process (``migfit serve``) create one
    ``CertificateExpiryCollector``, ``add`` each, and register it once.
    """
    collector = CertificateExpiryCollector()
    collector.add(server, source)
    registry.register(collector)
    return collector
