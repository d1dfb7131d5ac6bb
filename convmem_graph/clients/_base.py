"""What the vendor clients share: typed errors, retry with backoff, and the httpx call loop.

Retries cover what a retry can fix: HTTP 429 and 5xx, connection errors and timeouts, and the
vendor codes a client marks as retryable (rate limits, internal errors). The wait doubles from
``backoff_s`` up to ``max_backoff_s``, honours ``Retry-After`` when the server sends one, and has
jitter so clients that failed together do not retry together.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

__all__ = [
    "RetryPolicy",
    "RetryRequest",
    "VendorError",
    "VendorHTTPError",
    "VendorRateLimited",
    "call_async",
    "call_sync",
    "check_http",
    "retry_after_s",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class VendorError(Exception):
    """A vendor API answered with an error (or could not be reached).

    Attributes:
        vendor: ``tencent_im``, ``trtc`` or ``agora``.
        code: The vendor's error code (``ErrorCode``, ``Error.Code``, ``reason``), or the HTTP status.
        message: The vendor's message.
        status: The HTTP status, when there was a response.
        request_id: The vendor's request id, when it sent one.
    """

    def __init__(
        self,
        vendor: str,
        code: str | int | None,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        self.vendor = vendor
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        where = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{vendor}: error {code}{where}: {message}")


class VendorHTTPError(VendorError):
    """The request failed at the HTTP level (unreachable, timeout, or a non-JSON error page)."""


class VendorRateLimited(VendorError):
    """The vendor asked to slow down and the retries ran out."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry.

    Example:
        >>> RetryPolicy(max_backoff_s=8.0).delay(1, retry_after=30.0)
        8.0
    """

    max_attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    jitter: float = 0.2

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        base = min(self.backoff_s * float(2 ** (attempt - 1)), self.max_backoff_s)
        return base * (1 + random.uniform(0, self.jitter))


class RetryRequest(Exception):
    """Raised by a response check to ask for another attempt (with the error to raise if none is left)."""

    def __init__(self, error: VendorError, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


def retry_after_s(response: httpx.Response) -> float | None:
    """Return the ``Retry-After`` header in seconds, when it is a number."""
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def check_http(vendor: str, response: httpx.Response) -> None:
    """Raise ``RetryRequest`` for 429/5xx; other statuses are left to the vendor's own check."""
    if response.status_code == 429 or response.status_code >= 500:
        error_cls = VendorRateLimited if response.status_code == 429 else VendorHTTPError
        error = error_cls(vendor, response.status_code, response.text[:500], status=response.status_code)
        raise RetryRequest(error, retry_after_s(response))


def call_sync(
    vendor: str,
    send: Callable[[], httpx.Response],
    parse: Callable[[httpx.Response], _T],
    policy: RetryPolicy,
) -> _T:
    """Send, check and parse with retries (sync)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            try:
                response = send()
            except httpx.TransportError as exc:
                raise RetryRequest(
                    VendorHTTPError(vendor, type(exc).__name__, str(exc) or "transport error")
                ) from exc
            check_http(vendor, response)
            return parse(response)
        except RetryRequest as retry:
            if attempt >= policy.max_attempts:
                raise retry.error from None
            wait = policy.delay(attempt, retry.retry_after)
            logger.info("%s: %s; retry %d in %.2f s", vendor, retry.error.code, attempt, wait)
            time.sleep(wait)


async def call_async(
    vendor: str,
    send: Callable[[], Awaitable[httpx.Response]],
    parse: Callable[[httpx.Response], _T],
    policy: RetryPolicy,
) -> _T:
    """Send, check and parse with retries (async twin of :func:`call_sync`)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            try:
                response = await send()
            except httpx.TransportError as exc:
                raise RetryRequest(
                    VendorHTTPError(vendor, type(exc).__name__, str(exc) or "transport error")
                ) from exc
            check_http(vendor, response)
            return parse(response)
        except RetryRequest as retry:
            if attempt >= policy.max_attempts:
                raise retry.error from None
            wait = policy.delay(attempt, retry.retry_after)
            logger.info("%s: %s; retry %d in %.2f s", vendor, retry.error.code, attempt, wait)
            await asyncio.sleep(wait)
