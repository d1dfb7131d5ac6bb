"""Tencent UserSig (TLSSigAPIv2), generated locally from the SDKAppID's secret key.

PyPI's ``tls-sig-api-v2`` (last release 2019) does not import as its README says, so this is the
reference algorithm in a few lines: HMAC-SHA256 over ``TLS.identifier``, ``TLS.sdkappid``,
``TLS.time`` and ``TLS.expire`` lines, a JSON document, zlib, base64 with Tencent's URL-safe
alphabet (``+`` -> ``*``, ``/`` -> ``-``, ``=`` -> ``_``). :func:`verify_usersig` is the server side,
used by the tests' fake IM server.

Example:
    >>> sig = gen_usersig(1400000000, "secret", "administrator", expire=3600, now=1767268800)
    >>> verify_usersig(sig, 1400000000, "secret", "administrator", now=1767268900)
    True
    >>> verify_usersig(sig, 1400000000, "other", "administrator", now=1767268900)
    False
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import zlib
from typing import Any

__all__ = ["DEFAULT_EXPIRE_S", "decode_usersig", "gen_usersig", "verify_usersig"]

#: 180 days, as Tencent's reference libraries and console generator.
DEFAULT_EXPIRE_S = 180 * 24 * 3600

_TO_URL = str.maketrans({"+": "*", "/": "-", "=": "_"})
_FROM_URL = str.maketrans({"*": "+", "-": "/", "_": "="})


def _hmac(key: str, identifier: str, sdk_app_id: int, now: int, expire: int) -> str:
    content = f"TLS.identifier:{identifier}\nTLS.sdkappid:{sdk_app_id}\nTLS.time:{now}\nTLS.expire:{expire}\n"
    digest = hmac.new(key.encode("utf-8"), content.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def gen_usersig(
    sdk_app_id: int, key: str, identifier: str, *, expire: int = DEFAULT_EXPIRE_S, now: int | None = None
) -> str:
    """Return a UserSig for ``identifier``.

    Args:
        sdk_app_id: The application's SDKAppID.
        key: The secret key from the console (never logged).
        identifier: The UserID (an App admin for REST calls, the bot's ``UserId`` for TRTC).
        expire: Validity in seconds.
        now: Issue time in Unix seconds (default: now).

    Raises:
        ValueError: Empty key or identifier, or a non-positive ``expire``.
    """
    if not key or not identifier:
        raise ValueError("UserSig needs the SDKAppID secret key and a UserID")
    if expire <= 0:
        raise ValueError(f"UserSig expire must be positive; got {expire}")
    issued = int(time.time()) if now is None else int(now)
    doc = {
        "TLS.ver": "2.0",
        "TLS.identifier": identifier,
        "TLS.sdkappid": int(sdk_app_id),
        "TLS.expire": int(expire),
        "TLS.time": issued,
        "TLS.sig": _hmac(key, identifier, int(sdk_app_id), issued, int(expire)),
    }
    packed = zlib.compress(json.dumps(doc, separators=(",", ":")).encode("utf-8"))
    return base64.b64encode(packed).decode("ascii").translate(_TO_URL)


def decode_usersig(sig: str) -> dict[str, Any]:
    """Return the JSON document inside a UserSig.

    Raises:
        ValueError: Not a UserSig (bad base64, zlib or JSON).
    """
    try:
        packed = base64.b64decode(sig.translate(_FROM_URL), validate=True)
        doc = json.loads(zlib.decompress(packed))
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"not a UserSig ({type(exc).__name__})") from exc
    if not isinstance(doc, dict):
        raise ValueError("not a UserSig (no JSON object inside)")
    return doc


def verify_usersig(sig: str, sdk_app_id: int, key: str, identifier: str, *, now: int | None = None) -> bool:
    """Return whether ``sig`` was made with ``key`` for ``identifier`` and has not expired."""
    try:
        doc = decode_usersig(sig)
        issued, expire = int(doc["TLS.time"]), int(doc["TLS.expire"])
        given = str(doc["TLS.sig"])
    except (ValueError, KeyError, TypeError):
        return False
    if doc.get("TLS.identifier") != identifier or doc.get("TLS.sdkappid") != int(sdk_app_id):
        return False
    current = int(time.time()) if now is None else int(now)
    if current > issued + expire:
        return False
    expected = _hmac(key, identifier, int(sdk_app_id), issued, expire)
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))
