"""Request helpers shared by the routers: body caps, bearer tokens, errors, security headers.

Capped body reads, constant-time bearer checks, OpenAI-shaped errors, and the middleware adding the
security headers every response carries.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "SECURITY_HEADERS",
    "SecurityHeadersMiddleware",
    "openai_error",
    "read_capped_body",
    "token_matches",
]

#: The viewer's pages load one stylesheet and one script from ``/viewer/static`` and have no inline
#: script, style or ``on*`` handler, so everything is ``'self'``; ``frame-ancestors 'none'`` keeps
#: another site from framing a page (a click in a framed viewer cleared a variable).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)

#: Added to every response that does not set the header itself (``/docs`` sets its own CSP).
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii")),
    (b"x-frame-options", b"DENY"),  # for browsers without frame-ancestors
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),  # memory ids in viewer URLs stay on this server
)


class SecurityHeadersMiddleware:
    """ASGI middleware adding :data:`SECURITY_HEADERS` to every HTTP response.

    Plain ASGI rather than ``BaseHTTPMiddleware``: it only touches the ``http.response.start``
    message, so the proxy's streamed answers pass through unbuffered.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the headers the response does not already carry."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend((name, value) for name, value in SECURITY_HEADERS if name not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def read_capped_body(request: Request, limit: int) -> bytes:
    """Read the request body, refusing more than ``limit`` bytes with 413 (declared length first).

    The stream is read chunk by chunk, so a body without ``Content-Length`` (chunked) that grows
    past the cap is refused without buffering all of it.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise HTTPException(400, "invalid Content-Length") from None
        if size > limit:
            raise HTTPException(413, f"body of {size} bytes exceeds the {limit}-byte limit")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise HTTPException(413, f"body exceeds the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def token_matches(authorization: str | None, token: str) -> bool:
    """Return whether an ``Authorization`` header carries ``Bearer <token>`` (constant time)."""
    if not authorization:
        return False
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8"))


def openai_error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: Any = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """Return an OpenAI-shaped error response: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)
