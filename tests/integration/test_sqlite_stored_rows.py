"""A replay stores on SQLite exactly the rows the reference revision stored (issue 24 item 3).

The SQLite replay path is tuned for speed (messages parsed, normalized and written with less
Python per message, extraction skipped where it cannot find a fact); none of that may change a
stored value. The golden digests were written by
``python -m tests.integration.stored_rows --sqlite tests/integration/stored_rows_sqlite_golden.json``
at ``6826a9c``; regenerate them only for a change meant to alter what is stored, and say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.replay_archives import locomo_or_skip
from tests.integration.stored_rows import SQLITE_GOLDEN, replay_slice, sqlite_table_digests

pytestmark = [pytest.mark.integration]


def test_replayed_rows_equal_the_reference_revision(tmp_path: Path) -> None:
    locomo_or_skip()
    db = tmp_path / "slice.db"
    replay_slice(str(db), tmp_path)
    want = json.loads(SQLITE_GOLDEN.read_text(encoding="utf-8"))
    got = sqlite_table_digests(db)
    changed = sorted(t for t in want if got.get(t) != want[t])
    assert changed == [], {t: (want[t], got.get(t)) for t in changed}
    assert got["cm_messages"]["rows"] > 400 and got["cm_fragments"]["rows"] > 0
