"""A local OpenAI-compatible ``POST /v1/embeddings`` server whose vectors follow word meanings.

It checks what OpenAI-compatible embedding servers check (a bearer key, a non-empty ``model``,
``input`` as a text or a list of texts: token-id arrays, which only OpenAI itself accepts, are a
400 as on DashScope or vLLM; ``encoding_format`` ``float`` or ``base64``, the OpenAI client's own
default) and answers with unit vectors in which words of one *concept* share a dimension
(``python``, ``c++``, ``programming``, ``languages`` ... all mean "code"), and other words a hashed
one: a turn and a question that share no word but a concept come out near each other, as with a
real model, while the lexical index cannot connect them. Listens on 127.0.0.1, a free port, in a
daemon thread; a context manager stops it.

Example:
    >>> with FakeEmbeddingsServer() as server:
    ...     server.base_url.startswith("http://127.0.0.1:")
    True
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes._loopback import LoopbackServer

__all__ = ["CONCEPTS", "DIMENSIONS", "FakeEmbeddingsServer", "embed"]

DIMENSIONS = 64
#: Words that mean one thing: each concept is one dimension of its own.
CONCEPTS = {
    "code": ("python", "c++", "java", "rust", "programming", "languages", "language", "coding", "code"),
    "pet": ("dog", "puppy", "cat", "kitten", "pet", "pets", "animal", "animals"),
    "travel": ("flight", "trip", "travel", "journey", "abroad", "vacation"),
}
_CONCEPT_DIM = {word: k for k, words in enumerate(CONCEPTS.values()) for word in words}
_WORD = re.compile(r"[a-z+#]+|[\u4e00-\u9fff]")


def embed(text: str) -> list[float]:
    """The unit vector of ``text``: concept words on their concept's dimension, others hashed."""
    vector = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        dim = _CONCEPT_DIM.get(word)
        if dim is None:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=4).digest()
            dim = len(CONCEPTS) + int.from_bytes(digest, "little") % (DIMENSIONS - len(CONCEPTS))
            weight = 0.3  # a shared plain word counts, a shared meaning counts more
        else:
            weight = 1.0
        vector[dim] += weight
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class FakeEmbeddingsServer(LoopbackServer):
    """The server; ``requests`` holds the parsed bodies it answered (or refused), in order."""

    thread_name = "fake-embeddings"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The ``OPENAI_BASE_URL`` of the server, e.g. ``http://127.0.0.1:50123/v1``."""
        return f"{self.origin}/v1"

    def texts(self) -> int:
        """How many texts were embedded so far."""
        with self._lock:
            return sum(len(r["input"]) if isinstance(r.get("input"), list) else 1 for r in self.requests)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """Answers ``POST .../embeddings`` (see :meth:`_answer`)."""
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, body = server._answer(self.path, self.headers.get("Authorization") or "", raw)
                data = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        return _Handler

    def _answer(self, path: str, authorization: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        if not path.rstrip("/").endswith("/embeddings"):
            return 404, _error(f"unknown path {path}")
        if not authorization.startswith("Bearer ") or not authorization[7:].strip():
            return 401, _error("missing bearer key", "invalid_api_key")
        try:
            request = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return 400, _error("request body is not JSON")
        with self._lock:
            self.requests.append(request)
        model, given = request.get("model"), request.get("input")
        if not isinstance(model, str) or not model:
            return 400, _error("model: required")
        texts = [given] if isinstance(given, str) else given
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return 400, _error("input: must be a non-empty text or list of non-empty texts")
        encoding = request.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return 400, _error("encoding_format: float or base64")
        data = []
        for index, text in enumerate(texts):
            vector = embed(text)
            value: Any = vector
            if encoding == "base64":
                value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(len(t.split()) for t in texts)
        return 200, {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _error(message: str, code: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
