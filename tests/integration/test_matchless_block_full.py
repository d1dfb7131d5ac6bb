"""``test_every_budget_after_a_query_matching_nothing`` at full size: every even budget (the unit tier
runs every third of them)."""

from __future__ import annotations

import pytest

from tests.unit.payloads.test_matchless_block import blocks_after_a_query_matching_nothing


@pytest.mark.parametrize(("seed", "turns"), [(1, False), (1, True), (0, False), (2, True)])
def test_every_even_budget_after_a_query_matching_nothing(seed: int, turns: bool) -> None:
    blocks_after_a_query_matching_nothing(seed, turns, range(30, 130, 2))
