"""Fixtures for the server tests: an app on a temporary SQLite file, and the TRTC call fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_fixture

pytest.importorskip("fastapi", reason="the server extra is not installed (pip install -e '.[server]')")

from fastapi.testclient import TestClient  # noqa: E402

from convmem_graph.server.app import create_app  # noqa: E402
from convmem_graph.server.settings import ServeSettings  # noqa: E402

TRTC_KEY = "convmemTestKey2026"
AGORA_SECRET = "agora-test-secret"
BOT = "ai_xiaoyu_bot"


@pytest.fixture
def trtc_call() -> dict[str, Any]:
    return load_fixture("trtc_callbacks_one_call.json")


def make_settings(tmp_path: Path, **overrides: Any) -> ServeSettings:
    values: dict[str, Any] = {
        "db": str(tmp_path / "serve.db"),
        "trtc_callback_key": TRTC_KEY,
        "agora_webhook_secret": AGORA_SECRET,
        "bot_ids": [BOT],
        # The fixtures' deliveries were sent in January 2026: the replay window has its own test.
        "webhook_tolerance_ms": 0,
        # Starlette's TestClient sends Host: testserver (the Host allow-list has its own tests).
        "allowed_hosts": ["testserver"],
    }
    values.update(overrides)
    return ServeSettings(_env_file=None, **values)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ServeSettings:
    for var in ("CONVMEM_SERVE_TOKEN", "CONVMEM_UPSTREAM_URL", "CONVMEM_UPSTREAM_API_KEY", "CONVMEM_BOT_IDS"):
        monkeypatch.delenv(var, raising=False)
    return make_settings(tmp_path)


@pytest.fixture
def client(settings: ServeSettings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c
