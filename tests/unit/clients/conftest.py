"""Vendor client tests: replayed offline from vcrpy cassettes recorded against local fake vendors.

Default (``--record-mode`` unset or ``none``): sockets stay disabled, the fakes are not started and
every request is answered from ``cassettes/``; a request missing from a cassette fails. Re-record
against the fakes of ``tests/fakes/vendor_servers.py`` (they check UserSigs, TC3 signatures, Basic
auth, paging and error bodies the way the vendors do)::

    python -m pytest tests/unit/clients --record-mode=rewrite
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pytest_socket import disable_socket, enable_socket

from tests.fakes.vendor_servers import FakeVendors, make_im_history

REPLAY_BASE = "http://vendor.invalid"  # never resolved: the cassettes answer


def _recording(request: pytest.FixtureRequest) -> bool:
    return (request.config.getoption("--record-mode") or "none") != "none"


@pytest.fixture(autouse=True)
def _offline(request: pytest.FixtureRequest) -> Iterator[None]:
    # Overrides tests/unit's fixture: recording needs loopback sockets for the fakes.
    if _recording(request):
        enable_socket()
        yield
        return
    disable_socket(allow_unix_socket=True)
    yield
    enable_socket()


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    for name in ("Date", "date", "Server", "server"):
        response["headers"].pop(name, None)
    return response


@pytest.fixture
def vcr_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {
        "record_mode": request.config.getoption("--record-mode") or "none",
        # Not the host or port (a fresh fake per recording) nor the query (UserSig, random).
        "match_on": ["method", "path", "body"],
        "filter_headers": ["authorization", "x-tc-token"],
        "filter_query_parameters": ["usersig"],
        "before_record_response": _scrub_response,
        "decode_compressed_response": True,
    }


@pytest.fixture
def vendors(request: pytest.FixtureRequest) -> Iterator[FakeVendors | None]:
    """The fake vendors when recording, ``None`` when replaying."""
    if not _recording(request):
        yield None
        return
    history = make_im_history("u_10086", "ai_xiaoyu_bot", 1767268800, 10)
    with FakeVendors(im_history=history, im_page_size=4) as fake:
        yield fake


@pytest.fixture
def base_url(vendors: FakeVendors | None) -> str:
    return vendors.base_url if vendors is not None else REPLAY_BASE
