"""Request helpers shared by the routers: capped body reads, bearer tokens, OpenAI-shaped errors."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse

__all__ = ["openai_error", "read_capped_body", "token_matches"]


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
