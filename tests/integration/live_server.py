"""Live servers for one test on a free loopback port: an ASGI app in a thread, or ``convmem serve``."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(app: Any, *, timeout_s: float = 20.0) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields the base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on 127.0.0.1:{port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)


@contextmanager
def serve_process(db: Path, env: Mapping[str, str], *, start_s: float = 90.0) -> Iterator[tuple[str, Any]]:
    """``convmem serve --db db`` in a process of its own on a free loopback port.

    Yields ``(base URL, process)`` once ``/healthz`` answers 200; at the end SIGTERM, then SIGKILL
    after 60 s. ``env`` is the process's whole environment.
    """
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "convmem_graph", "serve", "--db", str(db), "--host", "127.0.0.1"]
        + ["--port", str(port), "--log-level", "warning"],
        cwd=REPO,
        env=dict(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_s
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"convmem serve exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
                )
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"convmem serve gave no /healthz 200 in {start_s:.0f} s"
            time.sleep(0.2)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
