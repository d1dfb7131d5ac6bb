"""Webhook signature helpers: Agora NCS notifications and TRTC AI-service callbacks.

- Agora: ``Agora-Signature-V2`` = lowercase hex HMAC-SHA256(secret, raw body) (preferred);
  ``Agora-Signature`` = lowercase hex HMAC-SHA1(secret, raw body) (accepted when V2 is absent).
- TRTC: header ``Sign`` = base64(HMAC-SHA256(callback key, raw body)).

Always verify the exact bytes received, before any JSON parsing; comparisons are constant-time
(:func:`hmac.compare_digest`). Receivers should also cap the body size with
:func:`check_body_size` before reading it whole. Secrets are never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from convmem_graph.errors import SourceFormatError

__all__ = [
    "AGORA_SIGNATURE_HEADER",
    "AGORA_SIGNATURE_V2_HEADER",
    "MAX_WEBHOOK_BODY_BYTES",
    "check_body_size",
    "sign_agora_v1",
    "sign_agora_v2",
    "sign_trtc",
    "verify_agora_signature",
    "verify_trtc_signature",
]

AGORA_SIGNATURE_HEADER = "Agora-Signature"
AGORA_SIGNATURE_V2_HEADER = "Agora-Signature-V2"
#: Largest webhook body accepted. An Agora 103 history holds at most 1024 items (``max_history``);
#: 4 MiB leaves room for long items while refusing abuse.
MAX_WEBHOOK_BODY_BYTES = 4 * 1024 * 1024


def _key(secret: str | bytes) -> bytes:
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if not key:
        raise ValueError("the signing secret is empty; configure the webhook secret")
    return key


def sign_agora_v1(body: bytes, secret: str | bytes) -> str:
    """Return the ``Agora-Signature`` value for ``body``: hex HMAC-SHA1."""
    return hmac.new(_key(secret), body, hashlib.sha1).hexdigest()


def sign_agora_v2(body: bytes, secret: str | bytes) -> str:
    """Return the ``Agora-Signature-V2`` value for ``body``: hex HMAC-SHA256."""
    return hmac.new(_key(secret), body, hashlib.sha256).hexdigest()


def sign_trtc(body: bytes, key: str | bytes) -> str:
    """Return the TRTC callback ``Sign`` value for ``body``: base64 HMAC-SHA256."""
    return base64.b64encode(hmac.new(_key(key), body, hashlib.sha256).digest()).decode("ascii")


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == wanted:
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            return value.strip() if isinstance(value, str) else None
    return None


def _same(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))


def verify_agora_signature(body: bytes, headers: Mapping[str, str], secret: str | bytes) -> bool:
    """Verify an Agora notification against its signature headers.

    ``Agora-Signature-V2`` (HMAC-SHA256) is checked when present; otherwise ``Agora-Signature``
    (HMAC-SHA1). Header names are case-insensitive; hex digits may be upper or lower case.

    Args:
        body: The raw request body bytes, exactly as received.
        headers: The request headers.
        secret: The notification secret from the Agora console.

    Returns:
        ``True`` when the signature matches; ``False`` when it does not or no signature header
        is present.

    Raises:
        ValueError: The secret is empty (a configuration error, not a bad request).

    Example:
        >>> body = b'{"eventType": 103}'
        >>> verify_agora_signature(body, {"agora-signature-v2": sign_agora_v2(body, "s3")}, "s3")
        True
    """
    key = _key(secret)
    v2 = _header(headers, AGORA_SIGNATURE_V2_HEADER)
    if v2:
        return _same(sign_agora_v2(body, key), v2.lower())
    v1 = _header(headers, AGORA_SIGNATURE_HEADER)
    if v1:
        return _same(sign_agora_v1(body, key), v1.lower())
    return False


def verify_trtc_signature(body: bytes, sign: str | bytes | None, key: str | bytes) -> bool:
    """Verify a TRTC AI-service callback's ``Sign`` header.

    Args:
        body: The raw request body bytes, exactly as received.
        sign: The ``Sign`` header value (base64).
        key: The callback key configured in the TRTC console.

    Returns:
        ``True`` when the signature matches.

    Raises:
        ValueError: The key is empty.

    Example:
        >>> verify_trtc_signature(b"{}", sign_trtc(b"{}", "k"), "k")
        True
    """
    expected = sign_trtc(body, key)
    if isinstance(sign, bytes):
        sign = sign.decode("latin-1")
    if not isinstance(sign, str) or not sign.strip():
        return False
    return _same(expected, sign.strip())


def check_body_size(
    body_or_length: bytes | bytearray | int | None, *, limit: int = MAX_WEBHOOK_BODY_BYTES
) -> None:
    """Refuse a webhook body larger than ``limit`` bytes (check ``Content-Length`` first, then the body).

    Args:
        body_or_length: The body, or its declared length (``None`` when unknown passes).
        limit: The largest accepted size.

    Raises:
        SourceFormatError: (``source="webhook"``) the body is too large or the length is negative.

    Example:
        >>> check_body_size(b"{}")
        >>> check_body_size(10, limit=5)
        Traceback (most recent call last):
        ...
        convmem_graph.errors.SourceFormatError: webhook: $: body of 10 bytes exceeds the 5-byte limit
    """
    if body_or_length is None:
        return
    size = body_or_length if isinstance(body_or_length, int) else len(body_or_length)
    if size < 0:
        raise SourceFormatError("webhook", "$", f"invalid body length {size}")
    if size > limit:
        raise SourceFormatError("webhook", "$", f"body of {size} bytes exceeds the {limit}-byte limit")
