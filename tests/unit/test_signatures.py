from __future__ import annotations

import pytest

from convmem_graph.errors import SourceFormatError
from convmem_graph.signatures import (
    MAX_WEBHOOK_BODY_BYTES,
    check_body_size,
    sign_agora_v1,
    sign_agora_v2,
    sign_trtc,
    verify_agora_signature,
    verify_trtc_signature,
)
from tests.conftest import FIXTURES, load_fixture

AGORA_BODY = (FIXTURES / "agora_webhook_103_agent_history.json").read_bytes()
AGORA_HEADERS = load_fixture("agora_webhook_103_agent_history.headers.json")
AGORA_SECRET = AGORA_HEADERS["_test_secret"]
TRTC = load_fixture("trtc_callbacks_one_call.json")
TRTC_KEY = TRTC["_test_key"]


def _headers(**only: str) -> dict[str, str]:
    return {
        k: v
        for k, v in AGORA_HEADERS.items()
        if not k.startswith("_") and (k in only.values() or k == "Content-Type")
    }


def test_agora_fixture_signatures_match_helpers() -> None:
    assert sign_agora_v1(AGORA_BODY, AGORA_SECRET) == AGORA_HEADERS["Agora-Signature"]
    assert sign_agora_v2(AGORA_BODY, AGORA_SECRET) == AGORA_HEADERS["Agora-Signature-V2"]


def test_agora_verifies_v2_v1_and_any_header_case() -> None:
    assert verify_agora_signature(AGORA_BODY, AGORA_HEADERS, AGORA_SECRET)
    v1_only = _headers(a="Agora-Signature")
    assert "Agora-Signature-V2" not in v1_only
    assert verify_agora_signature(AGORA_BODY, v1_only, AGORA_SECRET)
    lower = {k.lower(): v.upper() for k, v in _headers(a="Agora-Signature-V2").items()}
    assert verify_agora_signature(AGORA_BODY, lower, AGORA_SECRET)


def test_agora_rejects_tampered_body_wrong_secret_and_missing_header() -> None:
    tampered = AGORA_BODY.replace("黄金会员".encode(), "钻石会员".encode())
    assert tampered != AGORA_BODY
    assert not verify_agora_signature(tampered, AGORA_HEADERS, AGORA_SECRET)
    assert not verify_agora_signature(AGORA_BODY + b"\n", AGORA_HEADERS, AGORA_SECRET)
    assert not verify_agora_signature(AGORA_BODY, AGORA_HEADERS, "wrong_secret")
    assert not verify_agora_signature(AGORA_BODY, {"Content-Type": "application/json"}, AGORA_SECRET)
    # a valid V1 does not rescue a wrong V2: V2 is checked when present
    bad_v2 = {**_headers(a="Agora-Signature"), "Agora-Signature-V2": "0" * 64}
    assert not verify_agora_signature(AGORA_BODY, bad_v2, AGORA_SECRET)
    assert not verify_agora_signature(AGORA_BODY, {"Agora-Signature-V2": "not hex ✓"}, AGORA_SECRET)


def test_trtc_every_fixture_delivery_verifies() -> None:
    for delivery in TRTC["deliveries"]:
        body = delivery["raw_body"].encode("utf-8")
        assert sign_trtc(body, TRTC_KEY) == delivery["headers"]["Sign"]
        assert verify_trtc_signature(body, delivery["headers"]["Sign"], TRTC_KEY)


def test_trtc_rejects_tampered_body_and_wrong_key() -> None:
    delivery = TRTC["deliveries"][5]
    body = delivery["raw_body"].encode("utf-8")
    sign = delivery["headers"]["Sign"]
    assert not verify_trtc_signature(body.replace("八公里".encode(), "九公里".encode()), sign, TRTC_KEY)
    assert not verify_trtc_signature(body, sign, "otherKey2026")
    assert not verify_trtc_signature(body, "", TRTC_KEY)
    assert not verify_trtc_signature(body, None, TRTC_KEY)
    assert verify_trtc_signature(body, f" {sign} ".encode(), TRTC_KEY)


def test_empty_secret_is_a_configuration_error() -> None:
    with pytest.raises(ValueError):
        verify_agora_signature(AGORA_BODY, AGORA_HEADERS, "")
    with pytest.raises(ValueError):
        verify_trtc_signature(b"{}", "x", "")


def test_body_size_cap() -> None:
    check_body_size(AGORA_BODY)
    check_body_size(MAX_WEBHOOK_BODY_BYTES)
    check_body_size(None)
    with pytest.raises(SourceFormatError) as err:
        check_body_size(MAX_WEBHOOK_BODY_BYTES + 1)
    assert err.value.source == "webhook"
    with pytest.raises(SourceFormatError):
        check_body_size(b"x" * 11, limit=10)
    with pytest.raises(SourceFormatError):
        check_body_size(-1)
