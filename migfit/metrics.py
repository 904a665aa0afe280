"""What every migfit ``/metrics`` shares: a registry without ``_created`` series, build info.

prometheus_client writes a ``<name>_created`` sample (the Unix time the series was created)
beside every counter and histogram; it doubles the series of a scrape and no dashboard uses
it. Its switches are process-wide (``disable_created_metrics()``, or the
``PROMETHEUS_DISABLE_CREATED_SERIES`` environment variable read when prometheus_client is
imported), which would change every registry of the process, tests' and libraries' included.
So the registry made here drops those samples when it is collected, and nothing else does.

``registry()`` is what the composition root (``migfit webhook``, ``migfit extender``,
``migfit serve``) passes to the servers; it already holds ``migfit_build_info``.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

import migfit

BUILD_INFO = "migfit_build_info"

# The metric types whose samples prometheus_client follows with ``<name>_created``.
_WITH_CREATED = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


class Registry(CollectorRegistry):
    """A ``CollectorRegistry`` whose scrapes carry no ``_created`` samples."""

    def collect(self) -> Iterator[Metric]:
        for metric in super().collect():
            if metric.type in _WITH_CREATED:
                created = metric.name + "_created"
                # The collectors build their Metric objects afresh on every collection.
                metric.samples = [s for s in metric.samples if s.name != created]
            yield metric


class BuildInfoCollector(Collector):
    """``migfit_build_info{version, python} 1``: which build a server runs (join on it)."""

    def __init__(self, *, version: str = migfit.__version__,
                 python: str = platform.python_version()) -> None:
        self._labels = [version, python]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(BUILD_INFO, "The migfit build this server runs; always 1.",
                                   labels=["version", "python"])
        family.add_metric(self._labels, 1.0)
        yield family


def registry() -> Registry:
    """A new registry for one server's ``/metrics``, holding ``migfit_build_info``."""
    made = Registry(auto_describe=True)
    made.register(BuildInfoCollector())
    return made
