"""Fusing lexical and dense scores of candidate turns onto the block's one (BM25) scale."""

from __future__ import annotations

import pytest

from convmem_graph.payloads.fusion import DENSE_WEIGHT, fuse


def test_without_dense_scores_the_lexical_ones_stand() -> None:
    assert fuse({1: 2.0, 2: 0.5}, {}) == {1: 2.0, 2: 0.5}


@pytest.mark.parametrize("method", ["rrf", "sum"])
def test_a_turn_found_only_by_meaning_becomes_a_candidate(method: str) -> None:
    fused = fuse({1: 4.0, 2: 1.0}, {3: 0.95, 1: 0.60, 2: 0.50}, method=method)  # type: ignore[arg-type]
    assert fused[3] > 0
    assert set(fused) == {1, 2, 3}


def test_rrf_keeps_the_bm25_scale() -> None:
    lexical = {1: 6.0, 2: 3.0, 3: 1.0}
    fused = fuse(lexical, {3: 0.9, 2: 0.8, 4: 0.7})
    # The scores handed out are the lexical ones (then lower ones for extra candidates), so a
    # fact scored by BM25 competes with the fused turns on the same scale.
    assert sorted(fused.values(), reverse=True)[:3] == [6.0, 3.0, 1.0]
    assert max(fused.values()) == max(lexical.values())
    # Found by both sides beats found by one.
    assert fused[2] > fused[4] and fused[3] > fused[4]


def test_calibrated_sum_adds_at_most_a_share_of_the_best_lexical_score() -> None:
    fused = fuse({1: 2.0, 2: 1.0}, {1: 0.2, 2: 0.9, 3: 0.5}, method="sum")
    assert fused[2] == pytest.approx(
        1.0 + DENSE_WEIGHT * 2.0
    )  # the best cosine adds its share of the best BM25
    assert fused[1] == pytest.approx(2.0)  # below the median cosine: nothing added
    assert fused[3] == pytest.approx(0.0)  # the median itself adds 0
