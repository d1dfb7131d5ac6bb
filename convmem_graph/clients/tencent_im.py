"""Tencent Cloud Chat (IM) REST client: ``v4/openim/admin_getroammsg`` with paging.

Every call carries ``sdkappid``, the App admin ``identifier``, a locally generated ``usersig``
(:mod:`convmem_graph.clients.usersig`, cached until shortly before it expires), a random uint32 and
``contenttype=json``. The envelope's ``ActionStatus``/``ErrorCode`` decides success (the HTTP status
is 200 even for errors); rate-limit and internal codes are retried with backoff, others raise
:class:`TencentIMError`. Calls are spaced to stay under ``max_calls_per_s`` (IM allows 200/s).

Paging walks backwards in time: the next call keeps ``MinTime``, sets ``MaxTime`` to the previous
page's ``LastMsgTime`` and sends its ``LastMsgKey``, until ``Complete`` is 1. The pages come back as
``{"pages": [{"request", "response"}, ...]}``, the shape the ``tencent_im`` source reads.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from convmem_graph.clients._base import (
    RetryPolicy,
    RetryRequest,
    VendorError,
    VendorHTTPError,
    VendorRateLimited,
    call_async,
    call_sync,
)
from convmem_graph.clients.usersig import DEFAULT_EXPIRE_S, gen_usersig

__all__ = ["AsyncTencentIMClient", "RETRYABLE_IM_CODES", "TencentIMClient", "TencentIMError"]

VENDOR = "tencent_im"
DEFAULT_BASE_URL = "https://console.tim.qq.com"
#: Rate limits (60007, 60011, 60018, 60019, 70050) and internal errors (91000).
RETRYABLE_IM_CODES = frozenset({60007, 60011, 60018, 60019, 70050, 91000})
_RATE_CODES = frozenset({60007, 60011, 60018, 60019, 70050})
_MAX_PAGES = 10_000


class TencentIMError(VendorError):
    """IM answered ``ActionStatus: FAIL``; ``code`` is its ``ErrorCode``."""


def _parse_envelope(response: httpx.Response) -> dict[str, Any]:
    try:
        doc = response.json()
    except ValueError:
        raise VendorHTTPError(
            VENDOR,
            response.status_code,
            f"non-JSON answer: {response.text[:200]}",
            status=response.status_code,
        ) from None
    if not isinstance(doc, dict):
        raise VendorHTTPError(
            VENDOR, response.status_code, "answer is not a JSON object", status=response.status_code
        )
    code = doc.get("ErrorCode", 0)
    if doc.get("ActionStatus") == "OK" and code in (0, None):
        return doc
    message = str(doc.get("ErrorInfo") or "request failed")
    if isinstance(code, int) and code in RETRYABLE_IM_CODES:
        cls = VendorRateLimited if code in _RATE_CODES else TencentIMError
        raise RetryRequest(cls(VENDOR, code, message, status=response.status_code))
    raise TencentIMError(
        VENDOR, code if isinstance(code, int | str) else None, message, status=response.status_code
    )


class _Pacer:
    """Spaces calls to at most ``rate`` per second (thread-safe)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Return how long to wait before the next call may go."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
            return start - now


class _IMBase:
    def __init__(
        self,
        sdk_app_id: int,
        secret_key: str,
        admin: str = "administrator",
        *,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        max_calls_per_s: float = 100.0,
        usersig_expire_s: int = DEFAULT_EXPIRE_S,
    ) -> None:
        self.sdk_app_id = int(sdk_app_id)
        self._secret_key = secret_key
        self.admin = admin
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._pacer = _Pacer(max_calls_per_s)
        self._expire = usersig_expire_s
        self._sig: tuple[str, float] | None = None

    def __repr__(self) -> str:  # the secret key stays out of logs and tracebacks
        name = type(self).__name__
        return f"{name}(sdk_app_id={self.sdk_app_id}, admin={self.admin!r}, base_url={self.base_url!r})"

    def _usersig(self) -> str:
        now = time.time()
        if self._sig is None or now > self._sig[1]:
            issued = int(now)
            sig = gen_usersig(self.sdk_app_id, self._secret_key, self.admin, expire=self._expire, now=issued)
            self._sig = (sig, issued + self._expire * 0.9)
        return self._sig[0]

    def _params(self) -> dict[str, str]:
        return {
            "sdkappid": str(self.sdk_app_id),
            "identifier": self.admin,
            "usersig": self._usersig(),
            "random": str(secrets.randbelow(2**32)),
            "contenttype": "json",
        }

    def _url(self, command: str) -> str:
        return f"{self.base_url}/v4/{command}"

    @staticmethod
    def _first_request(
        operator: str, peer: str, min_time: int, max_time: int, max_cnt: int
    ) -> dict[str, Any]:
        if max_time < min_time:
            raise ValueError(f"admin_getroammsg: MaxTime {max_time} is before MinTime {min_time}")
        return {
            "Operator_Account": operator,
            "Peer_Account": peer,
            "MaxCnt": int(max_cnt),
            "MinTime": int(min_time),
            "MaxTime": int(max_time),
        }

    @staticmethod
    def _next_request(request: dict[str, Any], page: dict[str, Any]) -> dict[str, Any] | None:
        if page.get("Complete") == 1:
            return None
        last_time, last_key = page.get("LastMsgTime"), page.get("LastMsgKey")
        if not isinstance(last_time, int) or not isinstance(last_key, str) or not last_key:
            raise TencentIMError(VENDOR, "paging", "Complete is 0 but LastMsgTime/LastMsgKey are missing")
        if last_key == request.get("LastMsgKey") and last_time == request.get("MaxTime"):
            raise TencentIMError(VENDOR, "paging", f"the server repeated page cursor {last_key!r}")
        return {**request, "MaxTime": last_time, "LastMsgKey": last_key}


class TencentIMClient(_IMBase):
    """Sync IM REST client.

    Args:
        sdk_app_id: The IM application's SDKAppID.
        secret_key: Its secret key (UserSigs are made locally; never logged).
        admin: An App admin account.
        base_url: The data center's domain (``https://adminapisgp.im.qcloud.com`` for Singapore ...).
        timeout_s: Per-request timeout.
        retry: Retry policy for 429/5xx, transport errors and retryable IM codes.
        max_calls_per_s: Client-side pacing (IM allows 200 calls/s per endpoint).
        usersig_expire_s: Validity of the generated admin UserSig.
        transport: An httpx transport (tests).
    """

    def __init__(
        self,
        sdk_app_id: int,
        secret_key: str,
        admin: str = "administrator",
        *,
        transport: httpx.BaseTransport | None = None,
        **options: Any,
    ) -> None:
        super().__init__(sdk_app_id, secret_key, admin, **options)
        self._http = httpx.Client(timeout=self.timeout_s, transport=transport)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> TencentIMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, command: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``v4/<command>`` and return the successful envelope."""

        def send() -> httpx.Response:
            wait = self._pacer.reserve()
            if wait > 0:
                time.sleep(wait)
            return self._http.post(self._url(command), params=self._params(), json=body)

        return call_sync(VENDOR, send, _parse_envelope, self.retry)

    def iter_roam_pages(
        self, operator: str, peer: str, *, min_time: int, max_time: int, max_cnt: int = 100
    ) -> Iterator[dict[str, Any]]:
        """Yield ``{"request", "response"}`` for every page of one conversation window, newest first."""
        request: dict[str, Any] | None = self._first_request(operator, peer, min_time, max_time, max_cnt)
        for _ in range(_MAX_PAGES):
            if request is None:
                return
            page = self.call("openim/admin_getroammsg", request)
            yield {"request": request, "response": page}
            request = self._next_request(request, page)
        raise TencentIMError(VENDOR, "paging", f"more than {_MAX_PAGES} pages")

    def get_roam_messages(
        self, operator: str, peer: str, *, min_time: int, max_time: int, max_cnt: int = 100
    ) -> dict[str, Any]:
        """Return every page of the window as ``{"pages": [...]}`` (the ``tencent_im`` source reads it)."""
        pages = list(
            self.iter_roam_pages(operator, peer, min_time=min_time, max_time=max_time, max_cnt=max_cnt)
        )
        return {"pages": pages}


class AsyncTencentIMClient(_IMBase):
    """Async twin of :class:`TencentIMClient`."""

    def __init__(
        self,
        sdk_app_id: int,
        secret_key: str,
        admin: str = "administrator",
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Any,
    ) -> None:
        super().__init__(sdk_app_id, secret_key, admin, **options)
        self._http = httpx.AsyncClient(timeout=self.timeout_s, transport=transport)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncTencentIMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def call(self, command: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``v4/<command>`` and return the successful envelope."""

        async def send() -> httpx.Response:
            wait = self._pacer.reserve()
            if wait > 0:
                await asyncio.sleep(wait)
            return await self._http.post(self._url(command), params=self._params(), json=body)

        return await call_async(VENDOR, send, _parse_envelope, self.retry)

    async def iter_roam_pages(
        self, operator: str, peer: str, *, min_time: int, max_time: int, max_cnt: int = 100
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield ``{"request", "response"}`` for every page of one conversation window, newest first."""
        request: dict[str, Any] | None = self._first_request(operator, peer, min_time, max_time, max_cnt)
        for _ in range(_MAX_PAGES):
            if request is None:
                return
            page = await self.call("openim/admin_getroammsg", request)
            yield {"request": request, "response": page}
            request = self._next_request(request, page)
        raise TencentIMError(VENDOR, "paging", f"more than {_MAX_PAGES} pages")

    async def get_roam_messages(
        self, operator: str, peer: str, *, min_time: int, max_time: int, max_cnt: int = 100
    ) -> dict[str, Any]:
        """Return every page of the window as ``{"pages": [...]}``."""
        pages = [
            page
            async for page in self.iter_roam_pages(
                operator, peer, min_time=min_time, max_time=max_time, max_cnt=max_cnt
            )
        ]
        return {"pages": pages}
