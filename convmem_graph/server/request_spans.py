"""One OpenTelemetry span per ``convmem serve`` request, named ``METHOD /route/template``.

No-op without ``opentelemetry-api`` (see :mod:`convmem_graph.tracing`): the app is returned as is.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from convmem_graph.tracing import enabled, tracer

__all__ = ["asgi_middleware"]


def asgi_middleware(app: ASGIApp) -> ASGIApp:
    """Wrap an ASGI app so every HTTP request runs in a span named ``METHOD /route/template``."""
    if not enabled():
        return app

    async def traced(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode

        method = scope["method"]
        with tracer().start_as_current_span(f"{method} request", kind=SpanKind.SERVER) as span:
            status = 500

            async def send_status(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            try:
                await app(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                span.update_name(f"{method} {route}")
                span.set_attribute("http.request.method", method)
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))

    return traced
