"""One settings source: only the CLI and the server read the environment, through ``ConvMemSettings``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from convmem_graph.settings import ConvMemSettings
from convmem_graph.store.engine import POOL_DEFAULTS, PoolSettings, create_store_engine

PACKAGE = Path(__file__).resolve().parents[2] / "convmem_graph"

#: Modules outside cli/ and server/ allowed to read the environment, each with its reason.
ALLOWED = {
    "settings.py": "the settings class itself (pydantic-settings reads CONVMEM_*)",
}


def _reads_environment(path: Path) -> list[int]:
    """Lines of ``path`` that touch ``os.environ``, ``os.getenv`` or ``os.putenv``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "environb"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if {a.name for a in node.names} & {"environ", "getenv", "environb"}:
                lines.append(node.lineno)
    return sorted(lines)


def test_only_cli_server_and_settings_read_the_environment() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("cli/", "server/")) or rel in ALLOWED:
            continue
        found += [f"convmem_graph/{rel}:{line}" for line in _reads_environment(path)]
    assert found == [], "read the environment in cli/ or server/ (ConvMemSettings) and pass arguments"


def test_the_check_sees_an_environment_read(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nA = os.environ.get('X')\nB = os.getenv('Y')\nfrom os import environ\n")
    assert _reads_environment(probe) == [2, 3, 4]


def test_pool_settings_come_from_convmem_pg_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMEM_PG_POOL_SIZE", "20")
    monkeypatch.setenv("CONVMEM_PG_PREPARE_THRESHOLD", "none")
    pools = ConvMemSettings().pools()
    assert pools == PoolSettings(store_size=20, store_overflow=10, checkpoint_size=4, prepare_threshold=None)
    monkeypatch.setenv("CONVMEM_PG_MAX_OVERFLOW", "lots")
    with pytest.raises(ValueError, match="CONVMEM_PG_MAX_OVERFLOW must be a non-negative integer"):
        ConvMemSettings().pools()


def test_no_alias_but_the_documented_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for stray in ("DB", "PG_POOL_SIZE", "TRTC_SECRET_KEY", "IM_SDKAPPID"):
        monkeypatch.setenv(stray, "from a stray variable")
    settings = ConvMemSettings()
    assert settings.db == "convmem.db"
    assert settings.pg_pool_size is None and settings.trtc_secret_key is None and settings.im_sdkappid is None
    monkeypatch.setenv("CONVMEM_IM_SDKAPPID", "1400000000")
    assert ConvMemSettings().im_sdkappid == "1400000000"


def test_the_store_engine_takes_its_pools_as_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    monkeypatch.setenv("CONVMEM_PG_POOL_SIZE", "1")  # ignored below the settings
    url = "postgresql+psycopg://u@127.0.0.1:1/db"  # the engine connects lazily: nothing is dialled
    default = create_store_engine(url)
    sized = create_store_engine(url, pools=POOL_DEFAULTS._replace(store_size=9, store_overflow=2))
    try:
        assert default.pool.size() == POOL_DEFAULTS.store_size  # type: ignore[attr-defined]
        assert sized.pool.size() == 9  # type: ignore[attr-defined]
    finally:
        default.dispose()
        sized.dispose()
