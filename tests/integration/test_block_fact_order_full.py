"""``test_the_block_equals_the_full_walk`` at full size: eighteen more seeds (the unit tier runs six)."""

from __future__ import annotations

import pytest

from tests.unit.payloads.test_block_fact_order import block_equals_the_full_walk


@pytest.mark.parametrize("seed", range(6, 24))
def test_the_block_equals_the_full_walk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    block_equals_the_full_walk(seed, monkeypatch)
