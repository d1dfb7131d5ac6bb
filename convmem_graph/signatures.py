"""Webhook signature helpers: Agora NCS notifications and TRTC AI-service callbacks.

- Agora: ``Agora-Signature-V2`` = lowercase hex HMAC-SHA256(secret, raw body) (preferred);
  ``Agora-Signature`` = lowercase hex HMAC-SHA1(secret, raw body) (accepted when V2 is absent).
- TRTC: header ``Sign`` = base64(HMAC-SHA256(callback key, raw body)).

Always verify the exact bytes received, before any JSON parsing; comparisons are constant-time
(:func:`hmac.compare_digest`). Secrets are never logged.

Hardening (issue 10):

- The body cap is enforced inside ``verify_*`` too (``max_body_bytes``, default
  :data:`MAX_WEBHOOK_BODY_BYTES`): a larger body raises before any HMAC is computed. Receivers
  should still cap with :func:`check_body_size` before reading a body whole.
- When ``Agora-Signature-V2`` is present, only it is checked: a malformed or wrong V2 never falls
  back to the weaker V1/SHA-1 header (V1 is used only when V2 is absent).
- Replay window: with ``tolerance_ms`` (the setting; :data:`DEFAULT_TOLERANCE_MS`, 5 minutes, is the
  value receivers should pass), a correctly signed body whose send time (Agora ``notifyMs``, TRTC
  ``CallbackTs`` / ``CallbackMsTs``, ms) is missing or further than that from now is refused, so a
  captured delivery cannot be replayed years later. ``None`` skips the check (archives, tests).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping

from convmem_graph.errors import SourceFormatError

__all__ = [
    "AGORA_SIGNATURE_HEADER",
    "AGORA_SIGNATURE_V2_HEADER",
    "DEFAULT_TOLERANCE_MS",
    "MAX_WEBHOOK_BODY_BYTES",
    "send_time_ok",
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
#: Replay window for webhook send times (``notifyMs``, ``CallbackTs``): 5 minutes either way.
DEFAULT_TOLERANCE_MS = 5 * 60 * 1000

logger = logging.getLogger(__name__)
_SEND_TIME_FIELDS = {"agora": ("notifyMs",), "trtc": ("CallbackTs", "CallbackMsTs")}


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


def send_time_ok(body: bytes, source: str, tolerance_ms: int | None, *, now_ms: int | None = None) -> bool:
    """Return whether a webhook body's send time lies within ``tolerance_ms`` of now.

    Args:
        body: The raw body (already verified).
        source: ``agora`` (``notifyMs``) or ``trtc`` (``CallbackTs`` / ``CallbackMsTs``).
        tolerance_ms: The window either way; ``None`` accepts any time.
        now_ms: The current time (default: the clock).

    Example:
        >>> send_time_ok(b'{"notifyMs": 1000}', "agora", 300_000, now_ms=200_000)
        True
        >>> send_time_ok(b'{"notifyMs": 1000}', "agora", 300_000, now_ms=10**12)
        False
    """
    if tolerance_ms is None:
        return True
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    sent = None
    if isinstance(doc, dict):
        sent = next((doc[f] for f in _SEND_TIME_FIELDS[source] if f in doc), None)
    if isinstance(sent, bool) or not isinstance(sent, int):
        logger.warning(
            "%s delivery refused: no numeric send time (%s)", source, "/".join(_SEND_TIME_FIELDS[source])
        )
        return False
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if abs(now - sent) > tolerance_ms:
        logger.warning(
            "%s delivery refused: sent %d ms from now, outside the %d ms window",
            source,
            now - sent,
            tolerance_ms,
        )
        return False
    return True


def verify_agora_signature(
    body: bytes,
    headers: Mapping[str, str],
    secret: str | bytes,
    *,
    max_body_bytes: int = MAX_WEBHOOK_BODY_BYTES,
    tolerance_ms: int | None = None,
    now_ms: int | None = None,
) -> bool:
    """Verify an Agora notification against its signature headers.

    ``Agora-Signature-V2`` (HMAC-SHA256) is checked when present, and then only it (a malformed V2
    never falls back to V1); ``Agora-Signature`` (HMAC-SHA1) only when V2 is absent. Header names
    are case-insensitive; hex digits may be upper or lower case.

    Args:
        body: The raw request body bytes, exactly as received.
        headers: The request headers.
        secret: The notification secret from the Agora console.
        max_body_bytes: Larger bodies are refused before hashing.
        tolerance_ms: Replay window for ``notifyMs`` (pass :data:`DEFAULT_TOLERANCE_MS`); ``None``
            skips the check.
        now_ms: The current time for the window (default: the clock).

    Returns:
        ``True`` when the signature matches (and the send time is in the window); ``False`` when
        it does not or no signature header is present.

    Raises:
        ValueError: The secret is empty (a configuration error, not a bad request).
        SourceFormatError: The body exceeds ``max_body_bytes``.

    Example:
        >>> body = b'{"eventType": 103}'
        >>> verify_agora_signature(body, {"agora-signature-v2": sign_agora_v2(body, "s3")}, "s3")
        True
    """
    key = _key(secret)
    check_body_size(body, limit=max_body_bytes)
    v2 = _header(headers, AGORA_SIGNATURE_V2_HEADER)
    if v2 is not None:  # present, even empty or malformed: V2 alone decides
        ok = bool(v2) and _same(sign_agora_v2(body, key), v2.lower())
    else:
        v1 = _header(headers, AGORA_SIGNATURE_HEADER)
        ok = bool(v1) and _same(sign_agora_v1(body, key), (v1 or "").lower())
    return ok and send_time_ok(body, "agora", tolerance_ms, now_ms=now_ms)


def verify_trtc_signature(
    body: bytes,
    sign: str | bytes | None,
    key: str | bytes,
    *,
    max_body_bytes: int = MAX_WEBHOOK_BODY_BYTES,
    tolerance_ms: int | None = None,
    now_ms: int | None = None,
) -> bool:
    """Verify a TRTC AI-service callback's ``Sign`` header.

    Args:
        body: The raw request body bytes, exactly as received.
        sign: The ``Sign`` header value (base64).
        key: The callback key configured in the TRTC console.
        max_body_bytes: Larger bodies are refused before hashing.
        tolerance_ms: Replay window for ``CallbackTs`` / ``CallbackMsTs`` (pass
            :data:`DEFAULT_TOLERANCE_MS`); ``None`` skips the check.
        now_ms: The current time for the window (default: the clock).

    Returns:
        ``True`` when the signature matches (and the send time is in the window).

    Raises:
        ValueError: The key is empty.
        SourceFormatError: The body exceeds ``max_body_bytes``.

    Example:
        >>> verify_trtc_signature(b"{}", sign_trtc(b"{}", "k"), "k")
        True
    """
    _key(key)
    check_body_size(body, limit=max_body_bytes)
    if isinstance(sign, bytes):
        sign = sign.decode("latin-1")
    if not isinstance(sign, str) or not sign.strip():
        return False
    return _same(sign_trtc(body, key), sign.strip()) and send_time_ok(
        body, "trtc", tolerance_ms, now_ms=now_ms
    )


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
