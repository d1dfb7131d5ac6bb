"""The episodic tier: the index beside the messages, its search, and quoted turns in the memory block."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from sqlalchemy import text

from convmem_graph import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.models import EpisodeHit, EpisodeSearch, Fragment, MemorySnapshot, Message, VariableValue
from convmem_graph.payloads._quotes import resolve_relative_times
from convmem_graph.payloads.memory_block import MemoryBlockOptions, PartBudgets, build_memory_block
from convmem_graph.payloads.ranker import Scorer, text_terms
from convmem_graph.store import MemoryStore
from convmem_graph.store import _episode_search as S
from convmem_graph.store import episodes as E
from convmem_graph.store.sqlite import SQLITE_EPISODES
from convmem_graph.tokens import count_tokens

# 2023-05-08 13:56 UTC
T0 = 1_683_554_160_000
DAY = 86_400_000


def msg(mid: str, content: str, ts: int = T0, role: str = "user", **kw: object) -> Message:
    return Message(id=mid, role=role, content=content, channel="im", source="message", timestamp_ms=ts, **kw)


def index_rows(store: MemoryStore, memory_id: str | None = None) -> int:
    with store.engine.connect() as conn:
        return SQLITE_EPISODES.count(conn, memory_id)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = MemoryStore.from_url(str(tmp_path / "ep.db"))
    yield s
    s.close()


# -- terms ----------------------------------------------------------------------------------------


def test_search_terms_keep_the_newest_terms_of_a_long_query() -> None:
    old = " ".join(f"alpha{i}" for i in range(60))
    terms = E.search_terms(f"{old} where is the violin recital")
    assert terms[-2:] == ["violin", "recital"]
    assert len(terms) == 32 and "alpha0" not in terms


def test_search_terms_drop_stopwords_and_function_characters() -> None:
    assert E.search_terms("What did I tell you about the mango?") == ["mango"]
    assert E.search_terms("我的猫叫什么") == ["猫叫"]


def test_episode_text_spells_cjk_as_bigrams_and_keeps_latin() -> None:
    assert E.episode_text("东湖绿道 running") == "东湖 湖绿 绿道  running"
    assert E.episode_text("plain English only") == "plain English only"


# -- the index beside the messages --------------------------------------------------------------


def test_messages_are_indexed_in_their_transaction_and_found_by_stem(store: MemoryStore) -> None:
    store.add_messages("a", [msg("1", "I have been running marathons since 2019"), msg("2", "tea please")])
    assert index_rows(store, "a") == 2
    found = store.search_episodes("a", "Which races does she run?")
    assert [h.message.id for h in found.hits if h.reply_to is None] == ["1"]
    assert found.hits[0].terms == ["run"]
    assert found.document_frequency["run"] == 1 and found.total == 2


def test_chinese_turns_are_found_by_bigrams(store: MemoryStore) -> None:
    store.add_messages("a", [msg("1", "我每天早上在东湖绿道跑步"), msg("2", "今天有点累")])
    found = store.search_episodes("a", "你一般在哪里跑步？")
    assert [h.message.id for h in found.hits if h.reply_to is None] == ["1"]


def test_search_never_returns_another_memorys_turns_even_in_a_shared_bucket(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every memory in one rowid range: isolation must come from the join, not from the bucket.
    monkeypatch.setattr(S, "bucket", lambda memory_id: 7)
    store.add_messages("a", [msg("1", "my violin recital is on Friday")])
    store.add_messages("b", [msg("1", "my violin teacher is strict")])
    for memory_id in ("a", "b"):
        hits = store.search_episodes(memory_id, "violin").hits
        assert hits and {h.message.memory_id for h in hits} == {memory_id}


def test_a_reply_to_a_found_question_comes_along(store: MemoryStore) -> None:
    store.add_messages(
        "a",
        [
            msg("1", "Which novel do you keep rereading?", role="assistant"),
            msg("2", "Definitely Middlemarch, every winter.", ts=T0 + 1000),
            msg("3", "unrelated chatter about weather", ts=T0 + 2000),
        ],
    )
    hits = store.search_episodes("a", "What novel does she reread?").hits
    reply = [h for h in hits if h.reply_to is not None]
    assert [h.message.id for h in reply] == ["2"]


def test_delete_memory_leaves_no_index_rows(store: MemoryStore) -> None:
    store.add_messages("a", [msg(str(i), f"note {i} about kayaks") for i in range(20)])
    store.add_messages("b", [msg("1", "kayaks are fun")])
    assert index_rows(store) == 21
    store.delete_memory("a")
    assert index_rows(store, "a") == 0 and index_rows(store) == 1
    assert store.search_episodes("a", "kayaks").hits == []
    # The FTS index itself is consistent after the deletes.
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO cm_episodes(cm_episodes, rank) VALUES ('integrity-check', 1)"))


def test_purge_removes_the_index_rows_of_purged_messages(store: MemoryStore) -> None:
    store.add_messages("a", [msg(str(i), f"old note {i} about kayaks", ts=T0 + i) for i in range(10)])
    purged = store.purge_messages("a", before_ms=T0 + 100, keep_recent=3, only_processed=False)
    assert purged == 7
    assert index_rows(store, "a") == 3
    assert len(store.search_episodes("a", "kayaks").hits) == 3


def test_a_replaced_partial_message_is_reindexed(store: MemoryStore) -> None:
    store.add_messages("a", [msg("1", "Your lesson is at", partial=True)])
    store.add_messages("a", [msg("1", "Your lesson is at the cello studio")])
    assert index_rows(store, "a") == 1
    assert [h.message.content for h in store.search_episodes("a", "cello").hits] == [
        "Your lesson is at the cello studio"
    ]


def test_add_messages_without_index_writes_no_rows(store: MemoryStore) -> None:
    store.add_messages("a", [msg("1", "kayaks")], index=False)
    assert index_rows(store, "a") == 0


def test_a_database_from_before_the_index_is_indexed_on_open(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    first = MemoryStore.from_url(path)
    first.add_messages("a", [msg("1", "my kayak is red")])
    with first.engine.begin() as conn:  # as an older version left it: no index at all
        conn.exec_driver_sql("DROP TABLE cm_episodes")
        conn.exec_driver_sql("DROP TABLE cm_episode_meta")
        conn.exec_driver_sql("PRAGMA user_version = 0")  # versions before the schema stamp set none
    first.close()
    again = MemoryStore.from_url(path)
    assert [h.message.id for h in again.search_episodes("a", "kayak").hits] == ["1"]
    again.close()


# -- quotes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("said", "language", "expected"),
    [
        ("I went there yesterday.", "en", "I went there yesterday (7 May 2023)."),
        ("We moved last month", "en", "We moved last month (April 2023)"),
        ("signed up two weeks ago", "en", "signed up two weeks ago (week of 24 April 2023)"),
        ("It was last Saturday", "en", "It was last Saturday (6 May 2023)"),
        ("我昨天去看了牙医", "zh", "我昨天（2023-05-07）去看了牙医"),
        ("去年搬到了武汉", "zh", "去年（2022年）搬到了武汉"),
        ("三天前开始学吉他", "zh", "三天前（2023-05-05）开始学吉他"),
        ("nothing relative here", "en", "nothing relative here"),
    ],
)
def test_relative_times_are_resolved_against_the_day_said(said: str, language: str, expected: str) -> None:
    assert resolve_relative_times(said, date(2023, 5, 8), language) == expected  # type: ignore[arg-type]


# -- the ranker and the budget ----------------------------------------------------------------------


def test_text_terms_meet_at_one_stem() -> None:
    assert text_terms("dance dances danced dancing") == ["danc"] * 4


def test_scorer_prefers_rare_terms_from_the_memorys_history() -> None:
    episodes = EpisodeSearch(terms=["melanie", "pottery"], document_frequency={"melanie": 300}, total=400)
    scorer = Scorer("Melanie pottery", episodes, ["x"])
    assert scorer.score("pottery class") > scorer.score("Melanie said hi")
    assert scorer.score("nothing in common") == 0.0


@pytest.mark.parametrize(
    ("earlier", "current", "about_earlier", "about_current"),
    [
        ("We talked about Lisbon.", "Anyway, how is my garden doing?", "Lisbon", "garden"),
        ("上次说到成都。", "对了，我家猫咪最近怎么样？", "成都", "猫咪"),
    ],
)
def test_the_last_line_of_a_conversation_query_weighs_more(
    earlier: str, current: str, about_earlier: str, about_current: str
) -> None:
    pool = [about_earlier, about_current, "filler one", "filler two"]
    conversation = Scorer(f"{earlier}\n{current}", None, pool)
    assert conversation.score(about_current) > conversation.score(about_earlier) > 0.0
    # On one line the same words carry no order: both texts match one term of equal rarity.
    flat = Scorer(f"{earlier} {current}", None, pool)
    assert flat.score(about_earlier) > 0.0
    assert flat.score(about_current) == pytest.approx(flat.score(about_earlier))


def _snapshot(hits: list[Message], **kw: object) -> MemorySnapshot:
    episodes = EpisodeSearch(
        terms=[], total=100, hits=[EpisodeHit(seq=i + 1, message=m) for i, m in enumerate(hits)]
    )
    return MemorySnapshot(memory_id="m", episodes=episodes, **kw)  # type: ignore[arg-type]


def test_quoted_turns_carry_their_date_and_compete_with_facts() -> None:
    turns = [
        msg("t1", "I went to the pottery class yesterday and made a bowl.", memory_id="m"),
        msg("t2", "The weather is nice.", memory_id="m"),
    ]
    snap = _snapshot(
        turns,
        fragments=[Fragment(id="f1", memory_id="m", content="User likes tea.", key="pref:tea", updated_at=1)],
    )
    block = build_memory_block(snap, MemoryBlockOptions(query="When was the pottery class?", language="en"))
    assert "2023-05-08 I went to the pottery class yesterday (7 May 2023) and made a bowl." in block.text
    assert block.included_turn_ids == ["t1"]  # no query term in t2: never quoted
    lines = block.text.splitlines()
    # The matching turn outranks the unrelated fact, so a tight budget keeps the turn.
    tight = build_memory_block(
        snap, MemoryBlockOptions(query="When was the pottery class?", language="en", budget_tokens=50)
    )
    assert tight.included_turn_ids == ["t1"] and tight.included_fragment_ids == []
    assert lines.index("[fact] User likes tea.") < len(lines)


def test_a_turn_whose_fact_is_in_the_block_is_not_repeated() -> None:
    turn = msg("t1", "I'm allergic to peanuts, badly.", memory_id="m")
    fact = Fragment(
        id="f1",
        memory_id="m",
        content="User is allergic to peanuts.",
        key="allergy:peanut",
        source_message_ids=["t1"],
    )
    block = build_memory_block(
        _snapshot([turn], fragments=[fact]), MemoryBlockOptions(query="peanuts", language="en")
    )
    assert block.included_fragment_ids == ["f1"] and block.included_turn_ids == []


def test_recent_turns_the_payload_carries_are_not_quoted() -> None:
    turn = msg("t1", "My violin recital is on Friday.", memory_id="m")
    snap = _snapshot([turn], recent=[turn])
    quoted = build_memory_block(snap, MemoryBlockOptions(query="violin", language="en"))
    skipped = build_memory_block(snap, MemoryBlockOptions(query="violin", language="en", skip_recent_turns=5))
    assert quoted.included_turn_ids == ["t1"] and skipped.included_turn_ids == []


def test_budget_a_part_does_not_use_flows_to_the_others() -> None:
    turns = [
        msg(f"t{i}", f"Kayak trip number {i} was on the lake with friends.", memory_id="m") for i in range(40)
    ]
    snap = _snapshot(turns, variables={"name": VariableValue(name="name", value="Ana", origin="manual")})
    block = build_memory_block(snap, MemoryBlockOptions(query="kayak", language="en", budget_tokens=300))
    # No fact, no summary: the turns take what the variables leave, and the block is nearly full.
    assert block.tokens <= 300 and block.tokens > 250
    assert block.part_tokens["turns"] > 200 and block.text.count("[profile] Name: Ana") == 1
    capped = build_memory_block(
        snap, MemoryBlockOptions(query="kayak", language="en", part_budgets=PartBudgets(turns=60))
    )
    assert 0 < capped.part_tokens["turns"] <= 60


def test_manual_variables_stay_first_under_any_query() -> None:
    turns = [msg(f"t{i}", f"kayak kayak kayak {i}", memory_id="m") for i in range(30)]
    snap = _snapshot(turns, variables={"city": VariableValue(name="city", value="Bristol", origin="manual")})
    block = build_memory_block(snap, MemoryBlockOptions(query="kayak", language="en", budget_tokens=60))
    assert "City: Bristol" in block.text
    assert count_tokens(block.text) <= 60


def test_a_long_turn_is_cut_around_its_match() -> None:
    filler = " ".join(f"Sentence {i} says nothing much at all." for i in range(40))
    turn = msg("t1", f"{filler} The cello lesson moved to Tuesday. {filler}", memory_id="m")
    block = build_memory_block(_snapshot([turn]), MemoryBlockOptions(query="cello lesson", language="en"))
    (line,) = [ln for ln in block.text.splitlines() if ln.startswith("2023-05-08 ")]
    assert "The cello lesson moved to Tuesday." in line and "…" in line
    assert count_tokens(line) <= 300 // 4 + 16


# -- through ConvMemory -------------------------------------------------------------------------


def _conversation() -> list[dict[str, object]]:
    return [
        {
            "role": "user",
            "content": "I went to a ceramics workshop yesterday, it was lovely.",
            "timestamp": T0,
        },
        {"role": "assistant", "content": "That sounds wonderful!", "timestamp": T0 + 1000},
        {"role": "user", "content": "My sister Lena lives in Toronto now.", "timestamp": T0 + 2000},
    ]


@pytest.mark.parametrize("episodic", [True, False])
def test_payload_quotes_turns_only_with_the_tier_on(tmp_path: Path, episodic: bool) -> None:
    mem = ConvMemory.open(
        str(tmp_path / f"{episodic}.db"), config=MemoryConfig(episodic=episodic), clock=lambda: T0 + 30 * DAY
    )
    mem.ingest("u", _conversation(), source="openai")
    system = mem.payload("u", "openai", query="When did I go to the ceramics workshop?", recent_turns=0)[0]
    assert ("ceramics workshop yesterday (7 May 2023)" in system["content"]) is episodic
    assert (index_rows(mem.store, "u") > 0) is episodic
    mem.close()


def test_payload_uses_the_configured_block_budget(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "b.db"), config=MemoryConfig(memory_block_budget_tokens=60))
    mem.ingest("u", [{"role": "user", "content": f"kayak story number {i} on the lake"} for i in range(30)])
    system = mem.payload("u", "openai", query="kayak", recent_turns=0)[0]["content"]
    assert count_tokens(system) <= 60
    wide = mem.payload("u", "openai", query="kayak", recent_turns=0, budget_tokens=400)[0]["content"]
    assert count_tokens(wide) > 100
    mem.close()


def test_add_fragment_over_the_limit_is_a_clear_error(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "f.db"))
    with pytest.raises(ValueError, match="over the limit of 200"):
        mem.add_fragment("u", "x" * 201)
    with pytest.raises(ValueError, match="non-empty"):
        mem.add_fragment("u", "   ")
    mem.close()


def test_an_imported_memory_is_searchable_and_a_replaced_one_leaves_no_rows(store: MemoryStore) -> None:
    from convmem_graph.store.transfer import export_memory, import_memory

    store.add_messages("a", [msg("1", "my kayak is red"), msg("2", "my canoe is green")])
    doc = export_memory(store, "a")
    assert import_memory(store, doc, memory_id="b") == "b"
    assert [h.message.content for h in store.search_episodes("b", "kayak").hits] == ["my kayak is red"]
    import_memory(store, doc, memory_id="b", replace=True)
    assert index_rows(store, "b") == 2
    import_memory(store, doc, memory_id="c", index=False)
    assert index_rows(store, "c") == 0
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO cm_episodes(cm_episodes, rank) VALUES ('integrity-check', 1)"))


def test_a_found_turn_keeps_its_metadata(store: MemoryStore) -> None:
    sentences = [[T0, "Kayak trip on Sunday."], [T0 + 900, "With my sister."]]
    store.add_messages(
        "a", [msg("1", "Kayak trip on Sunday. With my sister.", metadata={"sentences": sentences})]
    )
    (hit,) = store.search_episodes("a", "kayak").hits
    assert hit.message.metadata == {"sentences": sentences}


def test_a_payload_that_sends_no_turns_still_quotes_the_newest_ones() -> None:
    from convmem_graph.memory import ConvMemory

    turn = "Do you think the Lisbon tram is worth riding?"
    with ConvMemory.open(":memory:") as mem:
        mem.ingest(
            "u1",
            [
                {"role": "user", "content": turn, "timestamp": 1_767_000_000_000},
                {"role": "assistant", "content": "Yes, take line 28 early.", "timestamp": 1_767_000_001_000},
            ],
            source="openai",
        )
        # An Agora join carries no turns: the agent starts empty, so the block quotes them.
        join = mem.payload("u1", "agora-llm", query="Lisbon tram", llm={"url": "http://127.0.0.1:9/v1"})
        assert turn in join["system_messages"][0]["content"]
        # OpenAI messages carry the recent turns themselves: the block does not repeat them.
        messages = mem.payload("u1", "openai", query="Lisbon tram", recent_turns=10)
        assert [m["content"] for m in messages if m["role"] == "user"] == [turn]
        assert not any(turn in m["content"] for m in messages if m["role"] == "system")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She was running marathons in 2019", ["run", "marathon", "2019"]),  # stop words go, numbers stay
        ("Cats? CATS! cat's", ["cat"]),  # one term however often and however cased
        ("我在武汉工作", ["在武", "武汉", "汉工", "工作"]),  # 我在 (two function characters) goes
        ("Talked about 东湖绿道 running", ["talk", "东湖", "湖绿", "绿道", "run"]),
    ],
)
def test_stemmed_terms_are_what_a_search_keeps_stemmed(text: str, expected: list[str]) -> None:
    from convmem_graph.text.terms import stemmed_terms

    assert sorted(stemmed_terms(text)) == sorted(expected)
