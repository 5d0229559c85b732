"""Prometheus metrics, computed from the database at scrape time.

Watchers and pollers run in other processes (Celery workers), so their counters are kept on
their database rows and read here; the web process exports one consistent view no matter
which replica is scraped. Apps add their own collectors with `register_collector`; a lease
module adds families to the lease collector (under its `up` gauge) with
`leases.metrics.add_family_source`.
"""

from __future__ import annotations

import abc
import gzip
import hmac
import logging
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from dashboard.proxies import client_address, in_networks, parse_networks
from dashboard.retention import retention_stats
from dashboard.services import worker_status

logger = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=False)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)


def _dashboard_version() -> str:
    try:
        return version("lease-dashboard")
    except PackageNotFoundError:
        return "source"


class DashboardCollector(Collector):
    def collect(self) -> Iterable[Metric]:
        yield InfoMetricFamily(
            "dashboard_build", "Build of the dashboard.", value={"version": _dashboard_version()}
        )
        age = GaugeMetricFamily(
            "dashboard_worker_heartbeat_age_seconds",
            "Seconds since a worker of the queue last ran a heartbeat task (-1: never).",
            labels=["queue"],
        )
        for queue in worker_status():
            seconds = queue["age_seconds"]
            age.add_metric([queue["queue"]], -1.0 if seconds is None else seconds)
        yield age


class DatabaseCollector(Collector, abc.ABC):
    """Series read from the database at scrape time, behind an `up` gauge.

    A scrape must not fail as a whole when the database cannot be read: the process metrics
    are still worth having, and the gauge going to 0 is what to alert on.
    """

    up_metric: str
    up_help: str

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(self.up_metric, self.up_help)
        try:
            metrics = list(self.collect_from_database())
        except DatabaseError:
            logger.exception("%s: the database could not be read", self.up_metric)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from metrics

    @abc.abstractmethod
    def collect_from_database(self) -> Iterable[Metric]:
        """The series; may raise DatabaseError."""


class RetentionCollector(Collector):
    """History retention's runs (dashboard.retention), as the shared cache holds them."""

    def collect(self) -> Iterable[Metric]:
        try:
            stats = retention_stats()
        except Exception:  # the cache's errors: the rest of the scrape still answers
            logger.exception("History retention's figures could not be read")
            return
        deleted = CounterMetricFamily(
            "dashboard_history_pruned_rows",
            "Rows deleted by history retention, by table, since the cache was last emptied.",
            labels=["table"],
        )
        for table, count in stats.deleted.items():
            deleted.add_metric([table], count)
        yield deleted
        if stats.last_run_at is not None:
            yield GaugeMetricFamily(
                "dashboard_history_prune_last_run_timestamp_seconds",
                "When history retention last ran (Unix time).",
                value=stats.last_run_at,
            )
            yield GaugeMetricFamily(
                "dashboard_history_prune_complete",
                "1 when the last retention run left nothing old behind; 0 when it stopped at "
                "its budget (the next run continues).",
                value=1 if stats.last_run_complete else 0,
            )


def register_collector(collector: Collector) -> None:
    REGISTRY.register(collector)


register_collector(DashboardCollector())
register_collector(RetentionCollector())


def label_text(labels: Mapping[str, str]) -> str:
    """The inside of a sample's braces, as prometheus_client writes it: names sorted, values
    escaped (backslash, newline, double quote: a cluster writes these names)."""
    return ",".join(f'{name}="{_escape_label_value(labels[name])}"' for name in sorted(labels))


def _escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class GaugeLines(Metric):
    """A gauge family written straight to exposition text.

    For the families with a series per election lease (thousands of lines at fleet size):
    prometheus_client escapes every label name and value of every sample again; here a
    lease's label text is escaped once (`label_text`) and shared by its series, which is
    most of a large scrape's Python time. `samples` is still there for anything reading the
    registry as Metric objects, built only when asked for.
    """

    def __init__(self, name: str, documentation: str) -> None:
        self._lines: list[tuple[str, float]] = []
        super().__init__(name, documentation, "gauge")

    def add_line(self, labels: str, value: float) -> None:
        """`labels` is `label_text(...)` of the series' labels."""
        self._lines.append((labels, value))

    @property
    def samples(self) -> list[Sample]:  # type: ignore[override]
        from prometheus_client.parser import text_string_to_metric_families

        if not self._lines:
            return []
        (family,) = text_string_to_metric_families(self.exposition().decode())
        return list(family.samples)

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        # Metric.__init__ starts with no samples; lines are only added with add_line.
        if value:
            raise TypeError("GaugeLines takes lines (add_line), not samples")

    def exposition(self) -> bytes:
        documentation = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        head = f"# HELP {self.name} {documentation}\n# TYPE {self.name} gauge\n"
        name = self.name
        body = "".join(
            f"{name}{{{labels}}} {floatToGoString(value)}\n" for labels, value in self._lines
        )
        return (head + body).encode("utf-8")


class _Fixed(Collector):
    """Metric families already collected, as a collector for generate_latest."""

    def __init__(self, metrics: Sequence[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def render_metrics() -> bytes:
    """The registry in the text format: prometheus_client writes the families, except
    `GaugeLines`, which write themselves (the same text, faster)."""
    parts: list[bytes] = []
    pending: list[Metric] = []
    for metric in REGISTRY.collect():
        if isinstance(metric, GaugeLines):
            if pending:
                parts.append(generate_latest(_Fixed(pending)))
                pending = []
            parts.append(metric.exposition())
        else:
            pending.append(metric)
    if pending:
        parts.append(generate_latest(_Fixed(pending)))
    return b"".join(parts)


# Prometheus asks for gzip on every scrape: the text is label names repeated, and shrinks
# about thirtyfold. A quick level: the scrape's time is the database's, not the deflate's.
GZIP_LEVEL = 3


def accepts_gzip(request: HttpRequest) -> bool:
    """Whether Accept-Encoding offers gzip (and does not refuse it with q=0)."""
    for part in request.headers.get("Accept-Encoding", "").split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() not in {"gzip", "x-gzip"}:
            continue
        quality = params.strip().lower().removeprefix("q=").strip() if "q=" in params else "1"
        try:
            return float(quality) > 0
        except ValueError:
            return False
    return False


def metrics_response(request: HttpRequest) -> HttpResponse:
    """The scrape, gzipped for a client that asks for it."""
    body = render_metrics()
    response = HttpResponse(content_type=CONTENT_TYPE_LATEST)
    if accepts_gzip(request):
        body = gzip.compress(body, compresslevel=GZIP_LEVEL)
        response["Content-Encoding"] = "gzip"
    response.content = body
    patch_vary_headers(response, ["Accept-Encoding"])
    return response


def _bearer_token_matches(request: HttpRequest) -> bool:
    header = request.headers.get("Authorization", "")
    if not settings.METRICS_TOKEN or not header.startswith("Bearer "):
        return False
    # Compared as bytes: compare_digest refuses str with non-ASCII characters (TypeError),
    # and a header is whatever the client sent. surrogatepass: neither a header nor an
    # environment variable is guaranteed to be valid Unicode.
    sent = header.removeprefix("Bearer ").strip().encode("utf-8", "surrogatepass")
    return hmac.compare_digest(sent, settings.METRICS_TOKEN.encode("utf-8", "surrogatepass"))


def _address_allowed(request: HttpRequest) -> bool:
    client = client_address(request)
    return client is not None and in_networks(client, parse_networks(settings.METRICS_ALLOWED_IPS))


def metrics_access_allowed(request: HttpRequest) -> bool:
    """Production: the METRICS_TOKEN bearer, always; development: the token or an address.

    In production an address proves nothing: behind an ingress every request arrives from
    the ingress pod's private address, so the internet would pass any address check. Without
    METRICS_TOKEN, production metrics are off. METRICS_ALLOWED_IPS, when set there, narrows
    where the token is accepted from. The address is the peer's unless it is a trusted proxy
    (TRUSTED_PROXY_CIDRS; see dashboard/proxies.py).
    """
    if settings.PRODUCTION:
        return _bearer_token_matches(request) and (
            not settings.METRICS_ALLOWED_IPS or _address_allowed(request)
        )
    return _bearer_token_matches(request) or _address_allowed(request)
