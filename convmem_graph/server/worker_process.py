"""The inbox worker in a child process: lifecycle runs off the server's interpreter and GIL.

A lifecycle run is tens of milliseconds of Python; in the server's own process it would hold the GIL
while the event loop relays a proxied stream. ``convmem serve`` therefore runs the worker in a
spawned child with its own :class:`~convmem_graph.memory.ConvMemory` on the same database (a file
or PostgreSQL; the inbox is durable, so nothing but wake-ups crosses over). One pipe carries
wake-ups and ``stop`` down, and ``busy``/``idle`` and the memories each batch changed up; the
parent's listeners (the proxy's block cache) run on those in a relay thread. The child exits when
asked (after draining what is pending) or as soon as the parent is gone (its pipe end closes), so a
``kill -9`` of the server leaves no worker behind.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from typing import Any

from convmem_graph.server.inbox import Inbox
from convmem_graph.server.settings import ServeSettings

__all__ = ["WorkerProcess"]

logger = logging.getLogger(__name__)

_ctx = multiprocessing.get_context("spawn")
#: Wake-ups are coalesced to one per interval, so a busy child never lets the pipe fill up.
_WAKE_INTERVAL_S = 0.02


def _drain(conn: Connection, timeout: float) -> tuple[bool, bool]:
    """Read every waiting message; return (woken, stop). A closed pipe (parent gone) means stop."""
    woken = stop = False
    try:
        if not conn.poll(timeout):
            return False, False
        while True:
            message = conn.recv()
            woken = True
            stop = stop or message == "stop"
            if not conn.poll(0):
                return woken, stop
    except (EOFError, OSError):
        return True, True


def _child_main(settings_json: str, conn: Connection) -> None:
    # Runs in the spawned child: open our own memory on the same database and work off the inbox.
    from convmem_graph.server.served import open_served_memory
    from convmem_graph.server.worker import InboxWorker

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settings = ServeSettings.model_validate_json(settings_json)
    mem = open_served_memory(settings)

    def send(message: Any) -> None:
        try:
            conn.send(message)
        except (OSError, ValueError):
            pass  # the parent is gone; the next read ends the loop

    try:
        worker = InboxWorker(mem, Inbox(mem.store), settings)
        worker.listeners.append(lambda ids: send(("changed", list(ids))))
        stop = False
        while True:
            send("busy")
            try:
                while worker.run_once():
                    pass
            except Exception:  # noqa: BLE001 - a database outage must not end the worker
                logger.exception("serve worker process: batch failed; retrying in 1 s")
                time.sleep(1.0)
            send("idle")
            if stop:
                return
            _, stop = _drain(conn, 1.0)
    finally:
        mem.close()
        conn.close()


class WorkerProcess:
    """Runs :class:`~convmem_graph.server.worker.InboxWorker` in a spawned child process.

    Args:
        inbox: The parent's inbox (for the backlog count).
        settings: Server settings (the child opens ``settings.db``; it cannot be an in-memory one).
    """

    def __init__(self, inbox: Inbox, settings: ServeSettings) -> None:
        self.inbox = inbox
        self.settings = settings
        #: Called in the parent's relay thread with the memory ids each child batch changed.
        self.listeners: list[Callable[[list[str]], None]] = []
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._last_wake = 0.0
        self._busy = True
        self._process: SpawnProcess | None = None
        self._relay: threading.Thread | None = None

    def start(self) -> None:
        """Spawn the child (it first works off what is pending) and the relay thread."""
        if self._process is not None:
            return
        parent, child = _ctx.Pipe(duplex=True)
        # The child needs no secret: it only reads the inbox and runs the lifecycle.
        settings_json = self.settings.model_dump_json(
            exclude={
                "token",
                "token_file",
                "proxy_token",
                "trtc_callback_key",
                "agora_webhook_secret",
                "upstream_api_key",
            }
        )
        self._process = _ctx.Process(
            target=_child_main, args=(settings_json, child), name="convmem-serve-worker", daemon=True
        )
        self._process.start()
        child.close()
        self._conn = parent
        self._relay = threading.Thread(
            target=self._relay_loop, args=(parent,), name="convmem-relay", daemon=True
        )
        self._relay.start()

    def _send(self, message: str) -> None:
        conn = self._conn
        if conn is None:
            return
        with self._send_lock:
            try:
                conn.send(message)
            except (OSError, ValueError):
                logger.warning("worker process is gone; pending deliveries wait for the next start")

    def wake(self) -> None:
        """Tell the child new work was stored (coalesced)."""
        now = time.monotonic()
        if now - self._last_wake >= _WAKE_INTERVAL_S:
            self._last_wake = now
            self._send("wake")

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the child to drain and exit; kill it after ``timeout`` (pending rows stay in the inbox)."""
        process = self._process
        if process is None:
            return
        self._send("stop")
        process.join(timeout)
        if process.is_alive():
            logger.warning(
                "worker process still busy after %.0f s; pending work resumes at the next start", timeout
            )
            process.kill()
            process.join(5)
        if self._conn is not None:
            self._conn.close()
        if self._relay is not None:
            self._relay.join(5)
        self._process = self._conn = None

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is pending and the child is between batches; ``True`` if so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._busy and self.inbox.refresh_count() == 0:
                return True
            time.sleep(0.05)
        return False

    def _relay_loop(self, conn: Connection) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message in ("busy", "idle"):
                self._busy = message == "busy"
                if not self._busy:
                    self.inbox.refresh_count()
                continue
            _, ids = message
            self.inbox.refresh_count()
            for listener in self.listeners:
                try:
                    listener(ids)
                except Exception:  # noqa: BLE001 - a listener must not stop the relay
                    logger.exception("serve worker relay: a listener failed")
