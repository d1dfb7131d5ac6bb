"""``GET /metrics`` of ``convmem serve``: Prometheus text format via ``prometheus_client``.

Needs the ``metrics`` extra (``prometheus_client``); without it the server runs without the route.
Each app has its own registry (two apps in one process, as in tests, never share counters).

Series:

- ``convmem_http_requests_total{route, method, status}`` and
  ``convmem_http_request_duration_seconds{route}``: every request, labelled by its route template
  (``/memories/{memory_id}``, never the id itself: ids name users and would grow without bound).
- ``convmem_webhook_deliveries_total{source, status}``: TRTC / Agora deliveries received.
- ``convmem_proxy_request_duration_seconds``: the memory proxy's whole answer time (upstream
  model included).
- ``convmem_inbox_deliveries{status}``: the inbox by status (``pending`` is the queue depth),
  read from the database at scrape time.
- ``convmem_lifecycle_runs_total`` and ``convmem_lifecycle_errors_total``: the worker's lifecycle
  runs and the deliveries it failed on (in-process worker; a separate worker process reports
  neither).
- ``convmem_http_errors_total{route}``: answers with a 5xx status.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE", "ServerMetrics"]

#: The Prometheus text format's content type.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_PROXY_ROUTE = "/v1/chat/completions"
_WEBHOOKS = {"/webhooks/trtc": "trtc", "/webhooks/agora": "agora"}


class _StateCollector(Collector):
    """Values read when scraped: inbox counts by status, the worker's run and error counts."""

    def __init__(self, inbox_counts: Callable[[], dict[str, int]], worker: Any) -> None:
        self._inbox_counts = inbox_counts
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        inbox = GaugeMetricFamily(
            "convmem_inbox_deliveries",
            "Inbox deliveries by status (pending: the queue depth)",
            labels=["status"],
        )
        counts = {"pending": 0, **self._inbox_counts()}
        for status, n in sorted(counts.items()):
            inbox.add_metric([status], n)
        yield inbox
        runs = getattr(self._worker, "lifecycle_runs", None)
        if isinstance(runs, int):
            yield CounterMetricFamily("convmem_lifecycle_runs", "Lifecycle runs of the worker", value=runs)
            errors = int(getattr(self._worker, "lifecycle_errors", 0))
            yield CounterMetricFamily(
                "convmem_lifecycle_errors", "Deliveries the worker's lifecycle runs failed on", value=errors
            )


class ServerMetrics:
    """The metrics of one app: an ASGI middleware that times requests and the ``/metrics`` text.

    Args:
        inbox_counts: Returns the inbox's deliveries per status (read at scrape time).
        worker: The worker; its ``lifecycle_runs`` / ``lifecycle_errors`` are exported when present.

    Example:
        >>> metrics = ServerMetrics(lambda: {"pending": 3}, worker=None)
        >>> metrics.observe("/webhooks/trtc", "POST", 200, 0.004)
        >>> text = metrics.render().decode()
        >>> 'convmem_inbox_deliveries{status="pending"} 3.0' in text
        True
        >>> 'convmem_webhook_deliveries_total{source="trtc",status="200"} 1.0' in text
        True
    """

    def __init__(self, inbox_counts: Callable[[], dict[str, int]], worker: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "convmem_http_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "convmem_http_request_duration_seconds",
            "HTTP request time by route template",
            ["route"],
            registry=self.registry,
        )
        self.deliveries = Counter(
            "convmem_webhook_deliveries",
            "Webhook deliveries received by source and answer status",
            ["source", "status"],
            registry=self.registry,
        )
        self.proxy = Histogram(
            "convmem_proxy_request_duration_seconds",
            "Memory proxy answer time (upstream model included)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=self.registry,
        )
        self.errors = Counter(
            "convmem_http_errors",
            "Answers with a 5xx status by route template",
            ["route"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(inbox_counts, worker))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """Record one answered request."""
        self.requests.labels(route, method, str(status)).inc()
        self.duration.labels(route).observe(seconds)
        if route in _WEBHOOKS:
            self.deliveries.labels(_WEBHOOKS[route], str(status)).inc()
        elif route == _PROXY_ROUTE:
            self.proxy.observe(seconds)
        if status >= 500:
            self.errors.labels(route).inc()

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """Wrap ``app`` so every HTTP request is observed (streamed answers until their last byte)."""

        async def observed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            start = time.perf_counter()
            status = 500  # an exception before the answer started is a 500 to the client

            async def send_status(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            try:
                await app(scope, receive, send_status)
            finally:
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                self.observe(template, scope["method"], status, time.perf_counter() - start)

        return observed
