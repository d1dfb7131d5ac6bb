"""LoCoMo's conversation lines, for tests that hold a rewritten pattern to its old matches on real text."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

#: The shared data folder beside the checkout (``../shared``), as the benchmarks find it.
LOCOMO = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "locomo" / "locomo10.json"


@cache
def _lines() -> tuple[str, ...]:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    return tuple(
        turn["text"]
        for sample in data
        for key, session in sample["conversation"].items()
        if key.startswith("session_") and isinstance(session, list)
        for turn in session
    )


def locomo_lines() -> list[str]:
    """Every turn's text of every LoCoMo conversation; skips the test when the data is absent."""
    if not LOCOMO.is_file():
        pytest.skip(f"LoCoMo data not found at {LOCOMO}")
    return list(_lines())
