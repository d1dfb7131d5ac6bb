"""Unit tests run offline: network sockets are disabled (unix sockets stay allowed for asyncio)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    yield
    enable_socket()
