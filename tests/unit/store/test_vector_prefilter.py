"""The turn vectors' first pass on the leading principal axes: same top k, fewer rows, kept fresh.

The pass's upkeep runs on each backend (``backend_url``; PostgreSQL on its portable path).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from convmem_graph.models import Message
from convmem_graph.store import MemoryStore, _vector_prefilter, _vectors
from convmem_graph.store._vectors import dense_search
from tests.unit.store.test_turn_vectors import portable  # noqa: F401 (a fixture)

T0 = 1_709_460_000_000


def _matrix(vectors: np.ndarray, *, first: bool = True) -> _vectors._Matrix:
    """The store's cached matrix of ``vectors`` (float16 BLOBs, as a search reads them)."""
    coarse, fine, scale = _vectors._quantize([row.astype("<f2").tobytes() for row in vectors])
    ids = np.arange(len(vectors), dtype=np.int64)
    pre = _vector_prefilter.fit(coarse, fine, scale) if first else None
    return _vectors._Matrix(None, len(vectors), ids, coarse, fine, scale, pre)


def _clustered(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    """Unit vectors around a common direction with a decaying spectrum, as sentence embeddings are."""
    mean = np.zeros(dim, dtype=np.float32)
    mean[0] = 3.0
    spread = (np.arange(1, dim + 1, dtype=np.float32) ** -0.9) * 1.5
    rows = mean + rng.standard_normal((n, dim)).astype(np.float32) * spread
    basis, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    rows = rows @ basis.T.astype(np.float32)  # not aligned with the coordinate axes
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=20, max_value=300),
    dim=st.integers(min_value=6, max_value=24),
    k=st.integers(min_value=1, max_value=12),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_a_pass_that_passes_every_row_returns_the_whole_scans_top_k(
    n: int, dim: int, k: int, seed: int
) -> None:
    # Small matrices with the pass forced on: when its window keeps every row, the rows scored and
    # their cosines are those of the scan without it, and the set is the exact float32 top k
    # (but for near-ties within the stored float16's precision).
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    q = rng.standard_normal(dim).astype(np.float32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_vector_prefilter, "MIN_ROWS", 1)
        patch.setattr(_vector_prefilter, "LEAD", max(1, dim // 3))
        patch.setattr(_vector_prefilter, "MAX_SHARE", 1.0)
        patch.setattr(_vector_prefilter, "Z", 1e6)
        with_first = _matrix(vectors)
        assert with_first.prefilter is not None
        chosen = _vector_prefilter.candidates(with_first.prefilter, q / np.linalg.norm(q), k)
        assert chosen is None or len(chosen) == n
        near = _vectors._nearest(with_first, q.tolist(), k)
    assert near == _vectors._nearest(_matrix(vectors, first=False), q.tolist(), k)
    exact = vectors @ (q / np.linalg.norm(q))
    order = np.argsort(-exact, kind="stable")
    cut = exact[order[k - 1]] - exact[order[k]] if k < n else 1.0
    if cut > 1e-3:
        assert set(near) == set(order[:k].tolist())


def test_the_pass_keeps_the_exact_top_k_of_clustered_vectors_from_a_fraction_of_the_rows() -> None:
    rng = np.random.default_rng(11)
    vectors = _clustered(rng, 20_000)
    queries = _clustered(rng, 40)
    first = _matrix(vectors)
    assert first.prefilter is not None
    found = total = 0
    passed = []
    for q in queries:
        chosen = _vector_prefilter.candidates(first.prefilter, q, 48)
        assert chosen is not None
        passed.append(len(chosen) / len(vectors))
        near = _vectors._nearest(first, q.tolist(), 48)
        best = set(np.argsort(-(vectors @ q))[:48].tolist())
        found += len(best & set(near))
        total += 48
    assert found / total >= 0.99
    assert float(np.median(passed)) < 0.1  # the scan's second step sees a tenth of the rows or less


def _along_the_mean(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    """Unit vectors as a sentence model's: a common direction holding most of each vector, little
    spread along it, a slowly decaying spectrum across it; queries are drawn alike, so they point
    mostly along the mean too."""
    spread = (np.arange(1, dim + 1, dtype=np.float32) ** -0.7) * 0.08
    spread[0] = 0.01  # unit vectors vary little along their mean
    rows = rng.standard_normal((n, dim)).astype(np.float32) * spread
    rows[:, 0] += 1.0
    basis, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((dim, dim)))  # rows' and queries'
    rows = rows @ basis.T.astype(np.float32)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_the_mean_direction_is_a_leading_axis_so_queries_along_it_are_filtered() -> None:
    # Principal axes alone leave the mean's direction among the trailing ones (its spread is
    # small), where a query's ~0.9 weight on it made the residual too wide to filter anything:
    # the pass was skipped for every query, as on LoCoMo conversations 5-8's vectors.
    rng = np.random.default_rng(23)
    vectors = _along_the_mean(rng, 20_000)
    queries = _along_the_mean(rng, 30)
    first = _matrix(vectors)
    assert first.prefilter is not None
    bare = _vectors._Matrix(None, len(vectors), first.ids, first.coarse, first.fine, first.scale)
    found = whole = 0
    passed = []
    for q in queries:
        chosen = _vector_prefilter.candidates(first.prefilter, q, 48)
        assert chosen is not None
        passed.append(len(chosen) / len(vectors))
        best = np.argsort(-(vectors @ q))[:48]
        assert np.isin(best, chosen).all()  # the window holds the exact float32 top 48
        found += len(set(best.tolist()) & set(_vectors._nearest(first, q.tolist(), 48)))
        whole += len(set(best.tolist()) & set(_vectors._nearest(bare, q.tolist(), 48)))
    # As good as the whole scan (these cosines are within float16's precision of each other near
    # the 48th, so neither holds every exact float32 neighbour).
    assert found >= 0.99 * whole
    assert float(np.median(passed)) < 0.1
    mean = vectors.astype(np.float64).mean(axis=0)
    assert abs(float(first.prefilter.axes[0] @ mean)) / float(np.linalg.norm(mean)) > 0.999


def test_a_flat_spectrum_skips_the_pass() -> None:
    # Random directions: the leading third of the axes holds about half the variance, the window
    # would keep most rows, so the whole matrix is scanned (the pass is not paid for).
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((_vector_prefilter.MIN_ROWS + 100, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    first = _matrix(vectors)
    assert first.prefilter is not None
    for q in vectors[:5]:
        assert _vector_prefilter.candidates(first.prefilter, q, 48) is None


def test_small_memories_are_scanned_whole() -> None:
    vectors = _clustered(np.random.default_rng(4), _vector_prefilter.MIN_ROWS - 1)
    assert _matrix(vectors).prefilter is None


def _seqs(store: MemoryStore, after: int = 0) -> list[int]:
    with store.read() as conn:
        return [
            int(s)
            for (s,) in conn.execute(
                text("SELECT seq FROM cm_messages WHERE memory_id = 'm' AND seq > :s ORDER BY seq"),
                {"s": after},
            )
        ]


def _add(store: MemoryStore, vectors: np.ndarray, start: int) -> list[int]:
    after = max(_seqs(store), default=0)
    store.add_messages(
        "m",
        [
            Message(
                id=f"t{start + i}",
                role="user",
                content=f"turn {start + i}",
                channel="im",
                source="message",
                timestamp_ms=T0 + start + i,
            )
            for i in range(len(vectors))
        ],
    )
    seqs = _seqs(store, after)
    store.save_turn_vectors("m", "rand", [(s, row.tolist()) for s, row in zip(seqs, vectors, strict=True)])
    return seqs


@pytest.mark.usefixtures("portable")
def test_the_pass_follows_appends_refits_and_deletes(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_pass_follows_the_vectors(backend_url, monkeypatch)


def check_pass_follows_the_vectors(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends extend the pass, growth refits it, deletes and replacements rebuild it (any backend)."""
    monkeypatch.setattr(_vector_prefilter, "MIN_ROWS", 64)
    monkeypatch.setattr(_vector_prefilter, "LEAD", 8)
    rng = np.random.default_rng(6)
    vectors = _clustered(rng, 200, dim=32)
    store = MemoryStore.from_url(url)
    key = (id(store.engine), "m", _vectors.vector_key("rand"))

    def search(q: np.ndarray, k: int) -> dict[int, float]:
        with store.read() as conn:
            return dense_search(conn, "m", "rand", q.tolist(), k)

    def cached() -> _vectors._Matrix:
        return _vectors._cache[key]

    try:
        store.ensure_memory("m")
        seqs = _add(store, vectors[:100], 0)
        assert next(iter(search(vectors[3], 1))) == seqs[3]
        first = cached().prefilter
        assert first is not None and first.fitted_rows == 100 and len(first.codes) == 100
        # Appended within the growth allowed: projected on the same axes, not refitted.
        later = _add(store, vectors[100:120], 100)
        assert next(iter(search(vectors[110], 1))) == later[10]
        grown = cached().prefilter
        assert grown is not None and grown.fitted_rows == 100 and len(grown.codes) == 120
        assert np.array_equal(grown.axes, first.axes)
        assert np.array_equal(grown.codes[:100], first.codes)
        # Past the growth allowed: fitted again on every row.
        more = _add(store, vectors[120:200], 120)
        assert next(iter(search(vectors[150], 1))) == more[30]
        refit = cached().prefilter
        assert refit is not None and refit.fitted_rows == 200 and len(refit.codes) == 200
        every = seqs + later + more
        # A delete rebuilds the matrix whole (and its pass): a deleted turn is never returned.
        store.purge_messages("m", before_ms=T0 + 10, keep_recent=0, only_processed=False)
        for q in vectors[:10]:
            assert not set(search(q, 190)) & set(every[:10])
        rebuilt = cached()
        assert rebuilt.prefilter is not None and rebuilt.prefilter.fitted_rows == 190
        assert len(rebuilt.prefilter.codes) == len(rebuilt.ids) == 190
        # Replaced vectors are searched as they now are.
        store.save_turn_vectors("m", "rand", [(every[50], vectors[0].tolist())])
        assert every[50] in search(vectors[0], 1)
        assert cached().prefilter is not None and cached().prefilter.fitted_rows == 190  # type: ignore[union-attr]
    finally:
        store.close()
