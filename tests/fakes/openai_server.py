"""A small local OpenAI-compatible chat-completions server with scripted replies.

It exists to RECORD the vcrpy cassettes of ``tests/integration/test_llm_extractor.py`` once, and to
run the few cases a cassette cannot hold (a client timeout has no response to record). It listens on
``127.0.0.1`` on a free port, serves ``POST /v1/chat/completions`` and answers each request with the
next scripted :class:`Reply`, shaped after the request: a forced tool call when the request carries
``tools`` (``method="function_calling"``), message content otherwise (``json_schema``, ``json_mode``
or plain text). Requests beyond the script get a 500 so a test that calls more often than it
scripted fails loudly, unless a ``responder`` is given: it answers every request the script does
not, from the request itself (concurrent callers, whose order no script can know, e.g. a 429 with
``Retry-After`` for one memory's requests and answers for the others).

Re-recording the cassettes (after a prompt or schema change, since requests match on their body)::

    python -m pytest tests/integration/test_llm_extractor.py --record-mode=rewrite

In that mode the test module starts this server and scripts it; in the default mode
(``--record-mode=none``) the server is not started and every request is answered from the
cassettes under ``tests/integration/cassettes/test_llm_extractor/``; a missing cassette fails.

Example:
    >>> with FakeOpenAIServer() as server:
    ...     server.script(Reply(content="hello"))
    ...     server.base_url.startswith("http://127.0.0.1:")
    True
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes._loopback import LoopbackServer

__all__ = ["FakeOpenAIServer", "Reply"]

#: Fixed ``created`` stamp (2026-01-01 20:00 +08:00) so re-recorded cassettes differ only where
#: the requests do.
_CREATED = 1767268800


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    Attributes:
        content: A dict is sent as its JSON text (the structured answer); a str is sent verbatim,
            which is how malformed JSON and plain summary text are scripted.
        status: HTTP status; anything but 200 sends an OpenAI-style error body.
        delay_s: Seconds to wait before answering (longer than the client timeout = a timeout).
        headers: Extra response headers (e.g. ``retry-after`` on a 429).
    """

    content: dict[str, Any] | str = ""
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class FakeOpenAIServer(LoopbackServer):
    """A scripted OpenAI-compatible server on ``127.0.0.1``; use it as a context manager.

    Attributes:
        requests: Parsed JSON bodies of the requests received, in order.
    """

    thread_name = "fake-openai"

    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        super().__init__()
        #: Answers the requests the script leaves unanswered (called with the parsed request body).
        self.responder = responder
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self._completion_no = 0

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give an OpenAI client, e.g. ``http://127.0.0.1:50123/v1``."""
        return f"{self.origin}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request consumes the next one."""
        with self._lock:
            self._replies.extend(replies)

    def pending(self) -> int:
        """Number of scripted replies not consumed yet."""
        with self._lock:
            return len(self._replies)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """Answers ``POST .../chat/completions`` from the script (see :meth:`_answer`)."""
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                status, body, headers, delay = server._answer(self.path, raw)
                if delay:
                    time.sleep(delay)
                data = json.dumps(body, ensure_ascii=False).encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (timeout test): nothing left to answer.
                    pass

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        return _Handler

    def _answer(self, path: str, raw: bytes) -> tuple[int, dict[str, Any], dict[str, str], float]:
        try:
            request = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return 400, _error("request body is not JSON", "invalid_request_error"), {}, 0.0
        with self._lock:
            self.requests.append(request)
            reply = self._replies.popleft() if self._replies else None
            self._completion_no += 1
            number = self._completion_no
        if not path.rstrip("/").endswith("/chat/completions"):
            return 404, _error(f"unknown path {path}", "invalid_request_error"), {}, 0.0
        if reply is None and self.responder is not None:
            reply = self.responder(request)
        if reply is None:
            return 500, _error("fake server: no scripted reply left", "server_error"), {}, 0.0
        if reply.status != 200:
            kind = "rate_limit_exceeded" if reply.status == 429 else "server_error"
            return reply.status, _error(f"scripted {reply.status}", kind), dict(reply.headers), reply.delay_s
        return 200, _completion(request, reply, number), dict(reply.headers), reply.delay_s


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _completion(request: dict[str, Any], reply: Reply, number: int) -> dict[str, Any]:
    text = reply.content if isinstance(reply.content, str) else json.dumps(reply.content, ensure_ascii=False)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    finish = "stop"
    tools = request.get("tools") or []
    if tools:
        name = tools[0]["function"]["name"]
        choice = request.get("tool_choice")
        if isinstance(choice, dict):
            name = choice.get("function", {}).get("name", name)
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": f"call_fake_{number}",
                "type": "function",
                "function": {"name": name, "arguments": text},
            }
        ]
        finish = "tool_calls"
    prompt_chars = len(json.dumps(request.get("messages", []), ensure_ascii=False))
    completion_tokens = max(1, len(text) // 4)
    prompt_tokens = max(1, prompt_chars // 4)
    return {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": _CREATED,
        "model": request.get("model", "fake-model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
