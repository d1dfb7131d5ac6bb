"""Shared test fixtures: fixture paths, a clean provider environment, and the backends (``backend_url``)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.store import MemoryStore
from tests.backends import BACKENDS, fresh_schema, postgres_base_url

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load_fixture(name: str) -> Any:
    """Load a JSON fixture from tests/fixtures."""
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's real key must never reach a test.
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "DASHSCOPE_API_KEY", "CONVMEM_MODEL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _no_heap_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server and the middleware freeze the process's heap once (convmem_graph._heap): in the
    # test process that would keep every test's cyclic garbage alive from then on.
    from convmem_graph import _heap

    monkeypatch.setattr(_heap, "_frozen", True)


@pytest.fixture(scope="session")
def pg_base_url() -> str:
    """The PostgreSQL test server's URL (skip when unset, fail when unreachable: ``tests/backends.py``)."""
    return postgres_base_url()


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new, empty database of this test's own, once per backend (``sqlite``, ``postgres``).

    ``sqlite``: a file path in ``tmp_path``. ``postgres``: a URL on a schema made for this test and
    dropped after it (marked ``integration`` and ``postgres``; skipped with the reason when
    ``CONVMEM_TEST_POSTGRES_URL`` is unset).
    """
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
        return
    with fresh_schema(request.getfixturevalue("pg_base_url"), "cm_backend") as url:
        yield url


@pytest.fixture
def backend_store(backend_url: str) -> Iterator[MemoryStore]:
    """A store on ``backend_url`` (each backend, a database of this test's own), closed after the test."""
    store = MemoryStore.from_url(backend_url)
    yield store
    store.close()


_INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under ``tests/integration`` ``integration``: the tier is the folder.

    ``-m "not integration"`` then leaves exactly the unit tier and the doctests, whether or not a
    file repeats the marker itself.
    """
    for item in items:
        if item.path.is_relative_to(_INTEGRATION):
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection made (modules, test items, parametrized data) out of the collector's reach.

    It lives until the session ends, yet every full collection the tests trigger traversed it,
    and the end-of-session collections of pytest's unraisable-exception check walked it five
    times. Only this pytest process is affected; what the tests create afterwards is collected
    as usual.
    """
    gc.freeze()
