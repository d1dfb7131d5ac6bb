"""Issue 10, finding 6: replay window, body cap inside verify_*, no V2 -> V1 fallback."""

from __future__ import annotations

import json
import time

import pytest

from convmem_graph.errors import SourceFormatError
from convmem_graph.signatures import (
    DEFAULT_TOLERANCE_MS,
    MAX_WEBHOOK_BODY_BYTES,
    sign_agora_v1,
    sign_agora_v2,
    sign_trtc,
    verify_agora_signature,
    verify_trtc_signature,
)

SECRET = "agora-secret"
KEY = "trtc-key"
NOW = 1_767_272_400_000


def agora_body(notify_ms: int | None) -> bytes:
    doc: dict[str, object] = {"noticeId": "n1", "productId": 17, "eventType": 103, "payload": {}}
    if notify_ms is not None:
        doc["notifyMs"] = notify_ms
    return json.dumps(doc).encode()


def trtc_body(field: str | None, ts: int) -> bytes:
    doc: dict[str, object] = {"EventGroupId": 9, "EventType": 903, "EventInfo": {"EventMsTs": ts}}
    if field is not None:
        doc[field] = ts
    return json.dumps(doc).encode()


def test_agora_years_old_delivery_is_refused_within_the_window() -> None:
    old = agora_body(NOW - 3 * 365 * 86_400_000)
    headers = {"Agora-Signature-V2": sign_agora_v2(old, SECRET)}
    win = {"tolerance_ms": DEFAULT_TOLERANCE_MS, "now_ms": NOW}
    assert verify_agora_signature(old, headers, SECRET)  # no window asked: signature only
    assert not verify_agora_signature(old, headers, SECRET, **win)
    fresh = agora_body(NOW - 60_000)
    assert verify_agora_signature(fresh, {"Agora-Signature-V2": sign_agora_v2(fresh, SECRET)}, SECRET, **win)
    future = agora_body(NOW + DEFAULT_TOLERANCE_MS + 1)
    assert not verify_agora_signature(
        future, {"Agora-Signature-V2": sign_agora_v2(future, SECRET)}, SECRET, **win
    )
    missing = agora_body(None)
    assert not verify_agora_signature(
        missing, {"Agora-Signature-V2": sign_agora_v2(missing, SECRET)}, SECRET, **win
    )


def test_agora_window_uses_the_clock_by_default() -> None:
    body = agora_body(int(time.time() * 1000))
    headers = {"agora-signature-v2": sign_agora_v2(body, SECRET)}
    assert verify_agora_signature(body, headers, SECRET, tolerance_ms=DEFAULT_TOLERANCE_MS)


@pytest.mark.parametrize("field", ["CallbackTs", "CallbackMsTs"])
def test_trtc_callback_ts_window(field: str) -> None:
    win = {"tolerance_ms": DEFAULT_TOLERANCE_MS, "now_ms": NOW}
    fresh = trtc_body(field, NOW - 1000)
    assert verify_trtc_signature(fresh, sign_trtc(fresh, KEY), KEY, **win)
    stale = trtc_body(field, NOW - DEFAULT_TOLERANCE_MS - 1)
    assert verify_trtc_signature(stale, sign_trtc(stale, KEY), KEY)
    assert not verify_trtc_signature(stale, sign_trtc(stale, KEY), KEY, **win)


def test_trtc_without_a_send_time_is_refused_when_a_window_is_asked() -> None:
    body = trtc_body(None, NOW)
    assert not verify_trtc_signature(body, sign_trtc(body, KEY), KEY, tolerance_ms=1000, now_ms=NOW)
    not_json = b"not json"
    assert not verify_trtc_signature(not_json, sign_trtc(not_json, KEY), KEY, tolerance_ms=1000, now_ms=NOW)


def test_the_body_cap_is_enforced_inside_verify() -> None:
    big = b"{" + b" " * MAX_WEBHOOK_BODY_BYTES + b"}"
    with pytest.raises(SourceFormatError, match="exceeds"):
        verify_trtc_signature(big, sign_trtc(big, KEY), KEY)
    with pytest.raises(SourceFormatError, match="exceeds"):
        verify_agora_signature(big, {"Agora-Signature-V2": sign_agora_v2(big, SECRET)}, SECRET)
    small = agora_body(NOW)
    with pytest.raises(SourceFormatError):
        verify_agora_signature(
            small, {"Agora-Signature-V2": sign_agora_v2(small, SECRET)}, SECRET, max_body_bytes=10
        )


@pytest.mark.parametrize("bad_v2", ["", "   ", "zz-not-hex", "00" * 32, "sha256=" + "0" * 64])
def test_a_present_but_malformed_v2_never_falls_back_to_v1(bad_v2: str) -> None:
    body = agora_body(NOW)
    headers = {"Agora-Signature-V2": bad_v2, "Agora-Signature": sign_agora_v1(body, SECRET)}
    assert not verify_agora_signature(body, headers, SECRET)


def test_v1_alone_still_verifies() -> None:
    body = agora_body(NOW)
    assert verify_agora_signature(body, {"Agora-Signature": sign_agora_v1(body, SECRET)}, SECRET)
    assert not verify_agora_signature(body, {"Agora-Signature": sign_agora_v1(body, "other")}, SECRET)
