"""A local OpenAI-compatible upstream model that streams: the far side of the memory proxy.

It listens on ``127.0.0.1`` on a free port and serves ``POST /v1/chat/completions`` the way an
OpenAI-compatible provider does: the bearer key is checked (401 with an OpenAI error body when it is
wrong), ``stream: true`` gets Server-Sent Events (``data: {chunk}`` lines, ``data: [DONE]`` last),
otherwise one ``chat.completion`` object; :meth:`fail_next` scripts an error status and body. Every
request body is recorded. It stops by itself after ``lifetime_s`` even if a test forgets to.

Example:
    >>> with ChatUpstream(key="k") as up:
    ...     up.url.startswith("http://127.0.0.1:")
    True
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["ChatUpstream", "sse_chunks"]


def sse_chunks(answer: str, pieces: int = 3) -> list[bytes]:
    """Return the SSE lines a provider sends for ``answer`` split in ``pieces``, then ``[DONE]``."""
    size = max(1, -(-len(answer) // pieces))
    parts = [answer[i : i + size] for i in range(0, len(answer), size)]
    out = []
    for i, part in enumerate([None, *parts]):
        delta = {"role": "assistant"} if part is None else {"content": part}
        doc = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1767268800,
            "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        out.append(b"data: " + json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n\n")
        del i
    out.append(b"data: [DONE]\n\n")
    return out


class ChatUpstream:
    """The fake provider; use it as a context manager."""

    def __init__(
        self, *, key: str, answer: str = "那就吃苹果吧，记得避开芒果。", lifetime_s: float = 300.0
    ) -> None:
        self.key = key
        self.answer = answer
        self.lifetime_s = lifetime_s
        self.requests: list[dict[str, Any]] = []
        self._failures: list[tuple[int, bytes]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    @property
    def url(self) -> str:
        """The chat-completions URL."""
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/chat/completions"

    def fail_next(self, status: int, body: bytes) -> None:
        """Answer the next request with ``status`` and ``body``."""
        with self._lock:
            self._failures.append((status, body))

    def start(self) -> ChatUpstream:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # As real providers do: without it a small SSE chunk waits for a delayed ACK (~40 ms).
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw)
                with fake._lock:
                    fake.requests.append({"headers": dict(self.headers), "body": body})
                    failure = fake._failures.pop(0) if fake._failures else None
                if self.path != "/v1/chat/completions":
                    return self._send(
                        404, b'{"error": {"message": "not found", "type": "invalid_request_error"}}'
                    )
                if self.headers.get("Authorization") != f"Bearer {fake.key}":
                    err = {
                        "error": {
                            "message": "Incorrect API key provided",
                            "type": "invalid_request_error",
                            "param": None,
                            "code": "invalid_api_key",
                        }
                    }
                    return self._send(401, json.dumps(err).encode())
                if failure is not None:
                    return self._send(*failure)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in sse_chunks(fake.answer):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    return None
                doc = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 1767268800,
                    "model": "fake",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": fake.answer},
                            "finish_reason": "stop",
                        }
                    ],
                }
                return self._send(200, json.dumps(doc, ensure_ascii=False).encode("utf-8"))

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ChatUpstream:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
