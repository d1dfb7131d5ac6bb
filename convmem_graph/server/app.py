"""``create_app``: the FastAPI application of ``convmem serve``.

FastAPI on uvicorn: request and settings models are pydantic v2 like the rest of the package, the
OpenAPI description at ``/docs`` comes for free, and uvicorn handles streaming and graceful
shutdown (SIGTERM drains the inbox worker through the lifespan).

Routes: ``GET /healthz``, ``POST /webhooks/trtc``, ``POST /webhooks/agora`` (signed, no token),
``POST /v1/chat/completions`` (the memory proxy), ``POST /tasks/trtc`` (register a task's memory),
plus, when installed, the viewer (``convmem_graph.viewer.routes``) and the Bailian-compatible API
(``convmem_graph.server.bailian``). Everything but the webhooks and ``/healthz`` needs the bearer
token when one is set.

Example:
    >>> from fastapi.testclient import TestClient
    >>> from convmem_graph.server.settings import ServeSettings
    >>> with TestClient(create_app(ServeSettings(db="sqlite://", _env_file=None))) as client:
    ...     client.get("/healthz").json()["status"]
    'ok'
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.server._http import token_matches
from convmem_graph.server.inbox import Inbox
from convmem_graph.server.proxy import build_proxy_router
from convmem_graph.server.settings import ServeSettings
from convmem_graph.server.webhooks import build_webhook_router
from convmem_graph.server.worker import InboxWorker, WorkerHandle

__all__ = ["OPTIONAL_ROUTERS", "create_app", "require_token"]

logger = logging.getLogger(__name__)

#: Modules whose ``build_router(mem, settings) -> APIRouter`` is included when importable.
OPTIONAL_ROUTERS = ("convmem_graph.viewer.routes", "convmem_graph.server.bailian")


def require_token(settings: ServeSettings) -> Callable[[Request], None]:
    """Return a dependency that demands ``Authorization: Bearer <token>`` when a token is set."""
    token = settings.secret("token")

    def check(request: Request) -> None:
        if token is not None and not token_matches(request.headers.get("authorization"), token):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    return check


class TaskRegistration(BaseModel):
    """Body of ``POST /tasks/trtc``: the memory a TRTC task belongs to."""

    task_id: str = Field(min_length=1, max_length=256)
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
        mem = ConvMemory.open(settings.db, config=MemoryConfig(bot_ids=list(settings.bot_ids)))
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
        logger.info(
            "convmem serve: store %s open, %d deliveries pending", served.store.safe_url, inbox.pending_count
        )
        try:
            yield
        finally:
            # SIGTERM: uvicorn stops accepting requests, then this drains what was acknowledged.
            await run_in_threadpool(worker.stop)
            for close in getattr(app.state, "on_close", []):
                await close()
            if owned:
                served.close()

    app = FastAPI(
        title="convmem serve",
        summary="Conversational memory for TRTC and Agora voice agents: webhooks and an LLM memory proxy.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.mem = mem
    app.state.inbox = inbox
    app.state.worker = worker
    app.state.on_close = []
    auth = [Depends(require_token(settings))]

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        """200 once the store is open, with the inbox backlog."""
        return {"status": "ok", "store": served.store.dialect, "pending": inbox.pending_count}

    @app.post("/tasks/trtc", tags=["service"], dependencies=auth)
    def register_trtc_task(body: TaskRegistration) -> dict[str, str]:
        """Record which memory a TRTC task belongs to (for ``CONVMEM_TRTC_MEMORY_FROM=task``)."""
        inbox.register_task(body.task_id, body.memory_id)
        worker.wake()
        return {"task_id": body.task_id, "memory_id": body.memory_id}

    app.include_router(build_webhook_router(inbox, worker, settings))
    app.include_router(
        build_proxy_router(mem, inbox, worker, settings, app, transport=upstream_transport), dependencies=auth
    )
    for router in _optional_routers(mem, settings):
        app.include_router(router, dependencies=auth)
    return app
