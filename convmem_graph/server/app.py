"""``create_app``: the FastAPI application of ``convmem serve``.

FastAPI on uvicorn: request and settings models are pydantic v2 like the rest of the package, the
OpenAPI description at ``/docs`` comes for free, and uvicorn handles streaming and graceful
shutdown (SIGTERM drains the inbox worker through the lifespan).

Routes: ``GET /healthz`` and ``GET /readyz``, ``GET /livez``, ``POST /webhooks/trtc``,
``POST /webhooks/agora`` (signed, no token), ``POST /v1/chat/completions`` (the memory proxy),
``POST /tasks/trtc`` and ``POST /tasks/agora`` (register a call to its memory), plus, when
installed, the viewer (``convmem_graph.viewer.routes``) and the Bailian-compatible API
(``convmem_graph.server.bailian``), and ``GET /openapi.json`` / ``GET /docs``.

Two token scopes: the admin token (``CONVMEM_SERVE_TOKEN``) opens everything but the webhooks and
the health routes; the chat token (``CONVMEM_PROXY_TOKEN``, the one a vendor's console holds) opens only
the proxy's chat route and gets 403 elsewhere. Every response carries a CSP without inline script,
``X-Frame-Options: DENY``, ``nosniff`` and ``Referrer-Policy: no-referrer``; a ``Host`` header
outside ``allowed_hosts`` gets 400 (DNS rebinding).

Health: ``/livez`` is liveness (the process answers; it never touches the store, so a database
outage does not get the server restarted); ``/healthz`` and its alias ``/readyz`` are readiness:
a cheap store read bounded by ``CONVMEM_HEALTH_TIMEOUT_S``, 200 when it answered, 503 when it
failed or timed out (a load balancer sees a PostgreSQL outage). Every request's store writes wait
at most ``CONVMEM_SERVE_WRITE_TIMEOUT_S`` for a lock and are answered 503 with ``Retry-After``
past it, nothing stored (see :mod:`convmem_graph.server.health`); reads never wait for writers.

Example:
    >>> from fastapi.testclient import TestClient
    >>> from convmem_graph.server.settings import ServeSettings
    >>> app = create_app(ServeSettings(db="sqlite://", _env_file=None))
    >>> with TestClient(app, base_url="http://127.0.0.1:8080") as client:  # a Host on the allow-list
    ...     client.get("/healthz").json()["status"]
    'ok'
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp

from convmem_graph._heap import freeze_long_lived
from convmem_graph.memory import ConvMemory
from convmem_graph.server._boundary import BoundaryRoute
from convmem_graph.server._http import SecurityHeadersMiddleware, token_matches
from convmem_graph.server.calls import agora_task_id
from convmem_graph.server.health import BoundedWritesMiddleware, StoreProbe, store_busy_response
from convmem_graph.server.inbox import Inbox
from convmem_graph.server.proxy import build_proxy_router
from convmem_graph.server.request_spans import asgi_middleware
from convmem_graph.server.served import open_served_memory
from convmem_graph.server.settings import ServeSettings
from convmem_graph.server.webhooks import build_webhook_router
from convmem_graph.server.worker import InboxWorker, WorkerHandle
from convmem_graph.store.write_gate import WriteTimeout
from convmem_graph.tracing import enabled as tracing_enabled

__all__ = ["OPTIONAL_ROUTERS", "create_app", "require_chat_token", "require_token"]

logger = logging.getLogger(__name__)

#: Modules whose ``build_router(mem, settings) -> APIRouter`` is included when importable.
OPTIONAL_ROUTERS = ("convmem_graph.viewer.routes", "convmem_graph.server.bailian")


def _unauthorized() -> HTTPException:
    return HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})


def require_token(settings: ServeSettings) -> Callable[[Request], None]:
    """Return a dependency demanding the admin token (``Authorization: Bearer``) when one is set.

    The chat token gets 403 here: it is valid, but only for the proxy's chat route.
    """
    token = settings.secret("token")
    chat = settings.secret("proxy_token")

    def check(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization")
        if token_matches(given, token):
            return
        if chat is not None and token_matches(given, chat):
            raise HTTPException(403, "this token (CONVMEM_PROXY_TOKEN) may only call /v1/chat/completions")
        raise _unauthorized()

    return check


def require_chat_token(settings: ServeSettings) -> Callable[[Request], None]:
    """Return the proxy's dependency: the chat token or the admin token, when either is set.

    Without a chat token the proxy takes the admin token, as before the scopes were split.
    """
    accepted = [t for t in (settings.secret("proxy_token"), settings.secret("token")) if t is not None]

    def check(request: Request) -> None:
        given = request.headers.get("authorization")
        if accepted and not any(token_matches(given, token) for token in accepted):
            raise _unauthorized()

    return check


def _docs_page(title: str) -> HTMLResponse:
    """Swagger UI with a CSP of its own: its CDN and the hash of its one inline script, no more."""
    page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{title} - Swagger UI")
    html = bytes(page.body).decode("utf-8")
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii") + "'"
        for script in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    )
    cdn = "https://cdn.jsdelivr.net"
    csp = (
        f"default-src 'self'; script-src 'self' {cdn} {hashes}; style-src 'self' {cdn} 'unsafe-inline'; "
        "img-src 'self' data: https://fastapi.tiangolo.com; object-src 'none'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    )
    return HTMLResponse(html, headers={"Content-Security-Policy": csp})


class TaskRegistration(BaseModel):
    """Body of ``POST /tasks/trtc``: the memory a TRTC task belongs to, and its two speakers."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1, max_length=256)
    memory_id: str = Field(min_length=1, max_length=256)
    human_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="AgentConfig.TargetUserId"
    )
    bot_id: str | None = Field(default=None, min_length=1, max_length=256, description="AgentConfig.UserId")


class AgentRegistration(BaseModel):
    """Body of ``POST /tasks/agora``: the memory an Agora agent (its ``agent_id``) belongs to."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str = Field(min_length=1, max_length=200)
    memory_id: str = Field(min_length=1, max_length=256)


def _optional_routers(mem: ConvMemory, settings: ServeSettings) -> list[APIRouter]:
    routers: list[APIRouter] = []
    for name in OPTIONAL_ROUTERS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # not installed (yet): the server runs without it
            raise
        routers.append(module.build_router(mem, settings))
    return routers


def _add_metrics(app: FastAPI, inbox: Inbox, worker: WorkerHandle, auth: list[Any]) -> None:
    """``GET /metrics`` (admin token) and the middleware feeding it, when prometheus_client is installed."""
    try:
        from convmem_graph.server.metrics import CONTENT_TYPE, ServerMetrics
    except ModuleNotFoundError as exc:
        if exc.name != "prometheus_client":
            raise
        return  # the metrics extra is not installed: no route, nothing measured
    metrics = app.state.metrics = ServerMetrics(inbox.counts, worker)

    def middleware(app: ASGIApp) -> ASGIApp:
        return metrics.middleware(app)

    app.add_middleware(middleware)  # a factory: Starlette calls it with app=

    @app.get("/metrics", tags=["service"], dependencies=auth, response_class=PlainTextResponse)
    def prometheus_metrics() -> PlainTextResponse:
        """Counters and gauges in the Prometheus text format (see ``convmem_graph.server.metrics``)."""
        return PlainTextResponse(metrics.render(), media_type=CONTENT_TYPE)


def create_app(
    settings: ServeSettings | None = None,
    *,
    mem: ConvMemory | None = None,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
) -> FastAPI:
    """Build the application; the store opens here, the worker starts with the app's lifespan.

    Args:
        settings: Server settings; ``None`` reads them from the environment.
        mem: An open memory to serve (the caller closes it); ``None`` opens ``settings.db`` with
            ``settings.bot_ids`` and closes it at shutdown.
        upstream_transport: httpx transport of the proxy's upstream client (tests); ``None`` uses
            the network.

    Returns:
        The FastAPI app; ``app.state`` holds ``settings``, ``mem``, ``inbox`` and ``worker``.
    """
    settings = settings or ServeSettings()
    owned = mem is None
    if mem is None:
        mem = open_served_memory(settings)
    inbox = Inbox(mem.store)
    worker: WorkerHandle
    if settings.worker_process:
        from convmem_graph.server.worker_process import WorkerProcess

        worker = WorkerProcess(inbox, settings)
    else:
        worker = InboxWorker(mem, inbox, settings)
    served = mem

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        # The proxy's spooled turns first (a crash or an outage left them), then its flusher.
        spool = getattr(app.state, "proxy_spool", None)
        if spool is not None:
            await run_in_threadpool(spool.start)
        # Everything built so far (store, graph, routes, models) lives as long as the server.
        freeze_long_lived()
        logger.info(
            "convmem serve: store %s open, %d deliveries pending", served.store.safe_url, inbox.pending_count
        )
        try:
            yield
        finally:
            # SIGTERM: uvicorn stops accepting requests, then this drains what was acknowledged.
            if spool is not None:
                await run_in_threadpool(spool.stop)
            await run_in_threadpool(worker.stop)
            for close in getattr(app.state, "on_close", []):
                await close()
            if owned:
                served.close()

    app = FastAPI(
        title="convmem serve",
        summary="Conversational memory for TRTC and Agora voice agents: webhooks and an LLM memory proxy.",
        lifespan=lifespan,
        # Served below behind the admin token: the schema maps every route an attacker could try.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    # The input boundary (ids, NUL, depth) for the routes defined below: /tasks/trtc, /tasks/agora.
    app.router.route_class = BoundaryRoute
    # Added last = runs first: even the Host check's 400 carries the security headers.
    app.add_middleware(BoundedWritesMiddleware, timeout_s=settings.serve_write_timeout_s)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.allowed_hosts, www_redirect=False)
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_exception_handler(WriteTimeout, store_busy_response)
    app.state.settings = settings
    app.state.mem = mem
    app.state.inbox = inbox
    app.state.worker = worker
    app.state.on_close = []
    probe = app.state.probe = StoreProbe(mem.store, settings.health_timeout_s)
    auth = [Depends(require_token(settings))]

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    def openapi_document() -> JSONResponse:
        """The OpenAPI document (admin token)."""
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=auth)
    def api_docs() -> HTMLResponse:
        """Swagger UI over ``/openapi.json`` (admin token)."""
        return _docs_page(app.title)

    # Async, and the read on the probe's own thread: requests waiting for a lock can fill the
    # request threadpool, and the health check must answer within its timeout all the same.
    async def health() -> JSONResponse:
        result = await probe.check()
        body: dict[str, Any] = {
            "status": "ok" if result.error is None else "unavailable",
            "store": served.store.dialect,
            "pending": inbox.pending_count,
            "check_ms": round(result.elapsed_ms, 1),
        }
        if result.error is not None:
            body["error"] = result.error
        return JSONResponse(body, status_code=200 if result.error is None else 503)

    @app.get("/healthz", tags=["service"], responses={503: {"description": "the store did not answer"}})
    async def healthz() -> JSONResponse:
        """Readiness: 200 when a store read answered within the health timeout, else 503."""
        return await health()

    @app.get("/readyz", tags=["service"], responses={503: {"description": "the store did not answer"}})
    async def readyz() -> JSONResponse:
        """Readiness, as ``/healthz`` (the name Kubernetes probes use)."""
        return await health()

    @app.get("/livez", tags=["service"])
    async def livez() -> dict[str, str]:
        """Liveness: the process answers; the store is not read (an outage is not a restart)."""
        return {"status": "ok"}

    @app.post("/tasks/trtc", tags=["service"], dependencies=auth)
    def register_trtc_task(body: TaskRegistration) -> dict[str, str]:
        """Record which memory a TRTC task belongs to, and which speaker is the bot.

        With ``bot_id`` or ``human_id`` every callback's speaker is known from the first one;
        the task's webhooks and its LLM requests (``X-Task-Id``) go to ``memory_id``.
        """
        inbox.register_task(body.task_id, body.memory_id, human_id=body.human_id, bot_id=body.bot_id)
        worker.wake()
        return {"task_id": body.task_id, "memory_id": body.memory_id}

    @app.post("/tasks/agora", tags=["service"], dependencies=auth)
    def register_agora_agent(body: AgentRegistration) -> dict[str, str]:
        """Record which memory an Agora agent belongs to: its 103 then needs no memory label."""
        inbox.register_task(agora_task_id(body.agent_id), body.memory_id)
        return {"agent_id": body.agent_id, "memory_id": body.memory_id}

    _add_metrics(app, inbox, worker, auth)
    if tracing_enabled():
        # Outermost: one OpenTelemetry span per request, the metrics and the Host check inside it.
        app.add_middleware(asgi_middleware)  # a factory: Starlette calls it with app=
    app.include_router(build_webhook_router(inbox, worker, settings))
    app.include_router(
        build_proxy_router(mem, inbox, worker, settings, app, transport=upstream_transport),
        dependencies=[Depends(require_chat_token(settings))],
    )
    for router in _optional_routers(mem, settings):
        app.include_router(router, dependencies=auth)
    return app
