"""Agora Conversational AI Engine REST client (v2): join, update, leave and history.

Auth is HTTP Basic with the RESTful customer id and secret (``Authorization: Basic ...``), or an RTC
token (``Authorization: agora token=<token>``). The base URL is configurable (Shengwang's
China-mainland host differs). Success is HTTP 200 with JSON; failures carry ``detail`` and
``reason``, raised as :class:`AgoraError`; 429 and 5xx are retried with backoff.

Example:
    >>> client = AgoraConvoAIClient("appid", customer_id="cid", customer_secret="secret")
    >>> client.base_url
    'https://api.agora.io/api/conversational-ai-agent/v2/projects/appid'
    >>> client.close()
"""

from __future__ import annotations

import base64
from typing import Any

import httpx

from convmem_graph.clients._base import RetryPolicy, VendorError, VendorHTTPError, call_async, call_sync

__all__ = ["AgoraConvoAIClient", "AgoraError", "AsyncAgoraConvoAIClient"]

VENDOR = "agora"
DEFAULT_HOST = "https://api.agora.io"


class AgoraError(VendorError):
    """ConvoAI answered an error; ``code`` is its ``reason`` (or the HTTP status)."""


def _parse(response: httpx.Response) -> dict[str, Any]:
    try:
        doc = response.json()
    except ValueError:
        doc = None
    if response.status_code != 200:
        if isinstance(doc, dict):
            reason = doc.get("reason") or response.status_code
            detail = str(doc.get("detail") or doc.get("message") or "request failed")
            raise AgoraError(VENDOR, reason, detail, status=response.status_code)
        raise VendorHTTPError(VENDOR, response.status_code, response.text[:300], status=response.status_code)
    if not isinstance(doc, dict):
        raise VendorHTTPError(VENDOR, 200, "answer is not a JSON object", status=200)
    return doc


class _AgoraBase:
    def __init__(
        self,
        app_id: str,
        *,
        customer_id: str | None = None,
        customer_secret: str | None = None,
        token: str | None = None,
        host: str = DEFAULT_HOST,
        timeout_s: float = 15.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not app_id:
            raise ValueError("Agora ConvoAI needs the project App ID")
        if customer_id and customer_secret:
            pair = f"{customer_id}:{customer_secret}".encode()
            self._auth = "Basic " + base64.b64encode(pair).decode("ascii")
        elif token:
            self._auth = f"agora token={token}"
        else:
            raise ValueError("Agora ConvoAI needs customer_id + customer_secret (Basic) or an RTC token")
        self.app_id = app_id
        self.base_url = f"{host.rstrip('/')}/api/conversational-ai-agent/v2/projects/{app_id}"
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()

    def __repr__(self) -> str:  # credentials stay out of logs
        return f"{type(self).__name__}(app_id={self.app_id!r}, base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._auth, "Content-Type": "application/json"}


class AgoraConvoAIClient(_AgoraBase):
    """Sync ConvoAI client; see the module docstring for auth.

    Args:
        app_id: The project App ID.
        customer_id: RESTful customer id (Basic auth).
        customer_secret: Its secret (never logged).
        token: An RTC token instead of Basic auth.
        host: API host (``https://api.agora.io``, or Shengwang's, or a test server).
        timeout_s: Per-request timeout.
        retry: Retry policy for 429/5xx and transport errors.
        transport: An httpx transport (tests).
    """

    def __init__(self, app_id: str, *, transport: httpx.BaseTransport | None = None, **options: Any) -> None:
        super().__init__(app_id, **options)
        self._http = httpx.Client(timeout=self.timeout_s, transport=transport)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> AgoraConvoAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        return call_sync(
            VENDOR,
            lambda: self._http.request(method, url, json=body, headers=self._headers()),
            _parse,
            self.retry,
        )

    def join(self, body: dict[str, Any]) -> dict[str, Any]:
        """Start an agent (``POST /join``); returns ``{"agent_id", "create_ts", "status"}``.

        Args:
            body: The join body, e.g. ``mem.payload(memory_id, "agora", ...)``.
        """
        return self._request("POST", "/join", body)

    def update(self, agent_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Update a running agent (``POST /agents/{id}/update``; ``mem.payload(..., "agora-update")``)."""
        return self._request("POST", f"/agents/{agent_id}/update", body)

    def leave(self, agent_id: str) -> dict[str, Any]:
        """Stop an agent (``POST /agents/{id}/leave``)."""
        return self._request("POST", f"/agents/{agent_id}/leave")

    def history(self, agent_id: str) -> dict[str, Any]:
        """Return the short-term memory of a running agent (``GET /agents/{id}/history``)."""
        return self._request("GET", f"/agents/{agent_id}/history")


class AsyncAgoraConvoAIClient(_AgoraBase):
    """Async twin of :class:`AgoraConvoAIClient`."""

    def __init__(
        self, app_id: str, *, transport: httpx.AsyncBaseTransport | None = None, **options: Any
    ) -> None:
        super().__init__(app_id, **options)
        self._http = httpx.AsyncClient(timeout=self.timeout_s, transport=transport)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAgoraConvoAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.base_url}{path}"

        async def send() -> httpx.Response:
            return await self._http.request(method, url, json=body, headers=self._headers())

        return await call_async(VENDOR, send, _parse, self.retry)

    async def join(self, body: dict[str, Any]) -> dict[str, Any]:
        """Async :meth:`AgoraConvoAIClient.join`."""
        return await self._request("POST", "/join", body)

    async def update(self, agent_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Async :meth:`AgoraConvoAIClient.update`."""
        return await self._request("POST", f"/agents/{agent_id}/update", body)

    async def leave(self, agent_id: str) -> dict[str, Any]:
        """Async :meth:`AgoraConvoAIClient.leave`."""
        return await self._request("POST", f"/agents/{agent_id}/leave")

    async def history(self, agent_id: str) -> dict[str, Any]:
        """Async :meth:`AgoraConvoAIClient.history`."""
        return await self._request("GET", f"/agents/{agent_id}/history")
