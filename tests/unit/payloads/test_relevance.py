"""Fragment ranking: lexical BM25 for Chinese and English, recency ties, expiry, embeddings."""

from __future__ import annotations

import time

import pytest
from langchain_core.embeddings import Embeddings

from convmem_graph.models import Fragment
from convmem_graph.payloads import rank_fragments
from convmem_graph.payloads.relevance import lexical_scores, query_terms
from tests.unit.payloads.test_story import MEMORY_ID, TRIP_EXPIRES, story_fragments


def frag(fid: str, content: str, updated_at: int = 0, **kw: object) -> Fragment:
    return Fragment(id=fid, memory_id=MEMORY_ID, content=content, key=fid, updated_at=updated_at, **kw)  # type: ignore[arg-type]


def ids(fragments: list[Fragment]) -> list[str]:
    return [f.id for f in fragments]


def test_chinese_query_ranks_the_mango_fragment_first() -> None:
    noise = [frag(f"n{i}", f"用户喜欢吃水果和第{i}种蛋糕。", 10**13 + i) for i in range(30)]
    ranked = rank_fragments("芒果", [*noise, *story_fragments()])
    assert ranked[0].id == "f_mango"
    assert len(ranked) == 34
    assert ids(rank_fragments("我能吃芒果吗？", story_fragments()))[0] == "f_mango"
    assert ids(rank_fragments("橘猫年糕", story_fragments()))[0] == "f_cat"
    assert ids(rank_fragments("下周去成都", story_fragments()))[0] == "f_trip"


def test_english_query_matches_word_prefixes_and_stems() -> None:
    frags = [
        frag("mango", "User is allergic to mangoes.", 1),
        frag("run", "User runs along West Lake every weekend.", 2),
        frag("cat", "User has an orange cat called Niangao.", 3),
        frag("noise", "User's catalogue of Mangolian words.", 4),
    ]
    assert ids(rank_fragments("Can I eat a mango?", frags))[0] == "mango"
    assert ids(rank_fragments("running", frags))[0] == "run"
    assert ids(rank_fragments("CATS", frags))[:1] == ["cat"]
    contents = [f.content for f in frags]
    # a stem matches a whole word plus an inflection: not "catalogue", not "Mangolian"
    assert set(lexical_scores("cat", contents)) == {2}
    assert set(lexical_scores("mango", contents)) == {0}
    assert set(lexical_scores("allergy", contents)) == {0}


def test_mixed_language_fragments() -> None:
    frags = [frag("zh", "用户对芒果过敏。", 1), frag("en", "User likes strawberry cake.", 2)]
    assert ids(rank_fragments("mango 芒果", frags))[0] == "zh"
    assert ids(rank_fragments("strawberry", frags))[0] == "en"


def test_ties_and_no_match_keep_recency_order() -> None:
    frags = [frag("a", "用户喜欢猫。", 1), frag("b", "用户喜欢猫。", 3), frag("c", "用户喜欢狗。", 2)]
    assert ids(rank_fragments("猫", frags)) == ["b", "a", "c"]
    assert ids(rank_fragments("", frags)) == ["b", "c", "a"]
    assert ids(rank_fragments("量子力学", frags)) == ["b", "c", "a"]
    same_time = [frag("x", "一。", 5), frag("y", "二。", 5), frag("z", "三。", 5)]
    assert ids(rank_fragments("", same_time)) == ["x", "y", "z"]  # stable for equal times


def test_expired_fragments_are_left_out_and_input_is_untouched() -> None:
    frags = story_fragments()
    before = [f.model_dump() for f in frags]
    assert "f_trip" not in ids(rank_fragments("成都", frags, now_ms=TRIP_EXPIRES))
    assert ids(rank_fragments("成都", frags, now_ms=TRIP_EXPIRES - 1))[0] == "f_trip"
    assert [f.model_dump() for f in frags] == before


def test_query_terms() -> None:
    assert query_terms("芒果") == [("芒果", 1.0, False), ("芒", 0.3, False), ("果", 0.3, False)]
    assert query_terms("猫") == [("猫", 1.0, False)]
    assert query_terms("I am allergic to the mangoes") == [("allerg", 1.0, True), ("mango", 1.0, True)]
    assert query_terms("running stopped") == [("run", 1.0, True), ("stop", 1.0, True)]
    assert query_terms("的了吗") == []  # only function characters
    assert len(query_terms(" ".join(f"word{i}x" for i in range(200)))) == 64


def test_very_frequent_terms_do_not_dominate() -> None:
    # "猫" is in most fragments; the rare "芒果" decides the order.
    frags = [frag(f"c{i}", f"用户的猫第{i}次打翻了水杯。", 100 + i) for i in range(200)]
    frags.append(frag("m", "用户对芒果过敏，猫也不吃芒果。", 1))
    ranked = rank_fragments("猫 芒果", frags)
    assert ranked[0].id == "m"
    assert ids(ranked[1:3]) == ["c199", "c198"]


class KeywordEmbeddings(Embeddings):
    """Deterministic fake: one dimension per concept, set when any of its words occurs."""

    CONCEPTS = (("fruit", "mango", "芒果", "水果"), ("pet", "cat", "猫"), ("sport", "run", "跑步"))

    def __init__(self) -> None:
        self.documents_embedded = 0

    def _vector(self, text: str) -> list[float]:
        low = text.lower()
        return [1.0 if any(w in low for w in words) else 0.0 for words in self.CONCEPTS]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents_embedded += len(texts)
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def test_embeddings_rank_semantic_matches_without_shared_words() -> None:
    frags = [
        frag("mango", "User is allergic to mango.", 1),
        frag("cat", "User has a cat.", 2),
        frag("run", "User likes to run.", 3),
    ]
    assert ids(rank_fragments("fruit", frags)) == ["run", "cat", "mango"]  # lexical: no match, recency
    emb = KeywordEmbeddings()
    assert ids(rank_fragments("fruit", frags, embeddings=emb))[0] == "mango"
    assert emb.documents_embedded == 3
    # only the top candidates are embedded
    many = [frag(f"x{i}", f"User note {i}.", 10 + i) for i in range(40)]
    emb = KeywordEmbeddings()
    assert len(rank_fragments("fruit", [*frags, *many], embeddings=emb, embed_limit=10)) == 43
    assert emb.documents_embedded == 10


def test_embeddings_returning_wrong_count_is_an_error() -> None:
    class Broken(KeywordEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return []

    with pytest.raises(ValueError, match="embed_documents returned 0 vectors for 2 fragments"):
        rank_fragments("fruit", [frag("a", "x"), frag("b", "y")], embeddings=Broken())


def test_ranking_10k_fragments_is_linear() -> None:
    topics = ["跑步", "游泳", "咖啡", "猫", "加班", "旅行", "电影", "读书"]
    frags = [frag(f"n{i}", f"用户提到第{i}件事：喜欢{topics[i % 8]}。", i) for i in range(10_000)]
    frags.append(frag("m", "用户对芒果过敏。", 0))
    started = time.perf_counter()
    ranked = rank_fragments("我能吃芒果吗？还有猫", frags)
    elapsed = time.perf_counter() - started
    assert ranked[0].id == "m"
    assert elapsed < 0.5  # loose: catches quadratic work, not a benchmark
