"""What every fake HTTP server of the tests shares: 127.0.0.1, a free port, a daemon thread."""

from __future__ import annotations

import abc
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self


class LoopbackServer(abc.ABC):
    """An ``http.server`` on ``127.0.0.1`` serving in a daemon thread; a context manager stops it."""

    #: The serving thread's name.
    thread_name = "fake-server"

    def __init__(self) -> None:
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class (usually closing over ``self``)."""

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>`` of the running server."""
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
