"""Bounded waits of ``convmem serve``: request writes time out, the health check reads the store.

A request's store writes run inside :func:`~convmem_graph.store.write_gate.bounded_writes`
(:class:`BoundedWritesMiddleware`, ``CONVMEM_SERVE_WRITE_TIMEOUT_S``): behind a write lock another
process holds (the SQLite write gate, a ``BEGIN IMMEDIATE``; on PostgreSQL a memory's advisory
lock or a row lock another session holds, a pool with every connection in use, a connect that
does not answer) or a memory's run in progress, a write gives up before writing anything and the
request is answered 503 with ``Retry-After``
(:func:`store_busy_response`), in the caller's error shape. A vendor retries a non-2xx webhook,
which is right: nothing was stored, and a retry of a stored delivery is recognized by its key.

:class:`StoreProbe` is the health check's cheap read. It runs on a thread of its own, not on the
request threadpool, which a burst of requests waiting for a lock can fill: ``/healthz`` answers
within its timeout (``CONVMEM_HEALTH_TIMEOUT_S``) whatever the other requests do. At most one
probe is in flight; a probe stuck on an unreachable database is awaited again by the next check
instead of piling up threads.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from convmem_graph.store import MemoryStore
from convmem_graph.store.write_gate import WriteTimeout, bounded_writes

__all__ = ["BoundedWritesMiddleware", "ProbeResult", "StoreProbe", "store_busy_response"]

logger = logging.getLogger(__name__)

#: The probe's read: one indexed row of a table every store has (also checks the schema is there).
_PROBE_SQL = "SELECT 1 FROM cm_memories LIMIT 1"


class BoundedWritesMiddleware:
    """Runs every HTTP request inside ``bounded_writes(timeout_s)``.

    Pure ASGI (not ``BaseHTTPMiddleware``), so the endpoint runs in this task's context and the
    threadpool threads Starlette starts for it get a copy of the bound.
    """

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with its writes bounded (lifespan events unbounded)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with bounded_writes(self.timeout_s):
            await self.app(scope, receive, send)


async def store_busy_response(request: Request, exc: Exception) -> JSONResponse:
    """Answer a request whose store write timed out: 503, ``Retry-After``, the caller's error shape.

    Async on purpose: Starlette runs a sync handler on the request threadpool, whose threads may
    all be waiting for the same lock, so the 503 itself would queue behind them.

    The proxy gets OpenAI's ``{"error": {...}}``, the webhooks TRTC/Agora's ``{"code", "message"}``
    (any non-2xx makes them retry), everything else ``{"code": "Store.Busy", "message", "detail"}``
    (Bailian's fields, and FastAPI's ``detail`` for the viewer).
    """
    timeout = exc.timeout_s if isinstance(exc, WriteTimeout) else 1.0
    message = f"the memory store is busy or unreachable; retry shortly ({exc})"
    headers = {"Retry-After": str(max(1, math.ceil(timeout)))}
    path = request.url.path
    logger.warning("503 on %s %s: %s", request.method, path, exc)
    if path.startswith("/v1/"):
        body: dict[str, object] = {
            "error": {"message": message, "type": "server_busy", "param": None, "code": "store_busy"}
        }
    elif path.startswith("/webhooks/"):
        body = {"code": 503, "message": message}
    else:
        body = {"code": "Store.Busy", "message": message, "detail": message}
    return JSONResponse(body, status_code=503, headers=headers)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Outcome of one health check: ``error`` is ``None`` when the store answered."""

    error: str | None
    elapsed_ms: float


class StoreProbe:
    """The store read of ``/healthz``, bounded in time and off the request threadpool.

    Args:
        store: The served store.
        timeout_s: Longest wait for the read; past it the check fails (the read goes on alone).
    """

    def __init__(self, store: MemoryStore, timeout_s: float) -> None:
        self.store = store
        self.timeout_s = timeout_s
        # One probe at a time: later checks wait for the outcome of one that hangs (a database
        # host gone silent) rather than each starting a connection of their own.
        self._inflight: Future[None] | None = None
        self._guard = threading.Lock()

    def _read(self) -> None:
        with self.store.read() as conn:
            conn.exec_driver_sql(_PROBE_SQL).first()

    def _start(self) -> Future[None]:
        future: Future[None] = Future()

        def run() -> None:
            try:
                self._read()
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting check
                future.set_exception(exc)
            else:
                future.set_result(None)

        # A daemon thread: a read stuck on a dead host must not keep the process from exiting.
        threading.Thread(target=run, name="convmem-health", daemon=True).start()
        return future

    async def check(self) -> ProbeResult:
        """Read the store once (or join the read in flight); never waits past ``timeout_s``."""
        started = time.monotonic()
        with self._guard:
            future = self._inflight
            if future is None or future.done():
                future = self._inflight = self._start()
        waited = asyncio.wrap_future(future)
        # Retrieve the outcome even when this check stopped waiting (no "never retrieved" log).
        waited.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        error: str | None = None
        try:
            await asyncio.wait_for(asyncio.shield(waited), self.timeout_s)
        except TimeoutError:
            error = f"store read did not answer within {self.timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - any failure of the read is the store being down
            # The type only in the answer (it is unauthenticated); the message, which may name the
            # database host, goes to the log.
            error = f"store read failed ({type(exc).__name__})"
            logger.warning("health check: %s: %s", error, exc)
        elapsed = (time.monotonic() - started) * 1000
        if error is not None and not error.startswith("store read failed"):
            logger.warning("health check: %s", error)
        return ProbeResult(error, elapsed)
