"""benchmarks/recall.py helpers: the answer-in-context metric, BM25 and packing, the dataset loaders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.recall_kit.bm25 import BM25, pack
from benchmarks.recall_kit.judge import parse_label
from benchmarks.recall_kit.locomo import ConversationIndex, DatasetError, load_locomo, parse_session_date
from benchmarks.recall_kit.madial import Dialogue, Event, load_madial, queries, recall, split_event
from benchmarks.recall_kit.text import (
    CHECKS,
    answer_in_context,
    answer_in_context_issue,
    answer_parts,
    canonical_dates,
    en_words,
    normalize,
)
from convmem_graph.tokens import count_tokens

FIXTURE = Path(__file__).parents[1] / "fixtures" / "recall_locomo_mini.json"


# ----------------------------------------------------------------------------------- the metric


@pytest.mark.parametrize(
    ("answer", "category", "context", "found"),
    [
        ("Lisbon", 4, "Maya: I moved to LISBON!", True),
        ("Adoption agencies", 1, "She researched adoption agencies.", True),
        ("The Sunday before 25 May 2023", 2, "the sunday before 25 May, 2023", True),
        ("7 May 2023", 2, "[2023-05-07] Caroline: I went to the group.", True),  # ISO dates fold
        ("May 2023", 2, "Said on May 8th, 2023.", True),
        ("7 May 2023", 2, "[8 May 2023] Caroline: I went yesterday.", False),
        (2022, 2, "I painted it in 2022.", True),  # integer answers
        (7, 4, "Back in 2017.", False),  # word boundaries: 7 is not in 2017
        ("Horse, sunset, sunrise", 1, "a horse at sunset and at sunrise", True),
        ("Horse, sunset, sunrise", 1, "a horse at sunset", False),  # category 1: every part
        ("Psychology, counseling", 3, "psychology, then counseling", False),  # others: the whole answer
        ("Psychology, counseling", 3, "psychology and counseling", True),  # 'and' and commas go
        ("clarinet and violin", 4, "plays the clarinet and the violin", True),  # articles and 'and' go
        ("Charlotte's Web", 4, "reading Charlotte’s Web again", True),  # curly apostrophe
        ("the", 4, "the the the", False),  # nothing left to find
    ],
)
def test_answer_in_context(answer: object, category: int, context: str, found: bool) -> None:
    assert answer_in_context(answer, category, normalize(context)) is found


@pytest.mark.parametrize(
    ("answer", "category", "context", "issue", "strict"),
    [
        # A list answer (a comma, any category): half of its content words, anywhere, in any order.
        ("clarinet, violin", 1, "Maya: I play the violin.", True, False),
        ("clarinet, flute, violin", 1, "Maya: I play the violin.", False, False),  # 1 of 3
        ("Horse, sunset, sunrise", 1, "sunrise over a horse", True, False),  # 2 of 3, other order
        ("Psychology, counseling", 3, "counseling and psychology", True, False),  # strict: whole phrase
        ("engine swaps, and body modifications", 4, "Did the engine swaps.", True, False),  # 2 of 4
        ("the, and", 1, "the and the", False, False),  # no content word: never found
        ("violin, piano", 1, "violinist", False, False),  # words, not substrings
        # Every other answer: the normalized phrase on word boundaries, exactly as strict.
        ("clarinet and violin", 4, "plays the clarinet and the violin", True, True),
        ("clarinet and violin", 4, "plays the violin", False, False),
        ("7 May 2023", 2, "[2023-05-07] Caroline: I went.", True, True),
        (7, 4, "Back in 2017.", False, False),
    ],
)
def test_issue_check_is_looser_for_list_answers_only(
    answer: object, category: int, context: str, issue: bool, strict: bool
) -> None:
    normalized_context = normalize(context)
    assert answer_in_context_issue(answer, category, normalized_context) is issue
    assert answer_in_context(answer, category, normalized_context) is strict
    assert CHECKS["strict"] is answer_in_context and CHECKS["issue"] is answer_in_context_issue


def test_normalization_is_explicit() -> None:
    assert normalize("The Sunday before 25 May, 2023!") == "sunday before 25 may 2023"
    assert canonical_dates("2023-13-40 and Jan 2nd, 2024") == "2023-13-40 and 2 january 2024"
    assert normalize("Bart在圣诞节晚会上跳舞，感觉非常开心。") == "bart在圣诞节晚会上跳舞感觉非常开心"
    assert answer_parts('"Nothing is Impossible", "Charlotte\'s Web"', 1) == [
        "nothing is impossible",
        "charlottes web",
    ]
    assert en_words("What did Caroline research about adoption?") == ["caroline", "research", "adoption"]


# --------------------------------------------------------------------------------- BM25, packing


def test_bm25_scores_follow_the_formula() -> None:
    docs = [["red", "apple"], ["green", "pear", "pear"], ["red", "car", "red", "fast"]]
    index = BM25(docs)
    avg = 3.0
    idf_red = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))

    def part(tf: int, length: int) -> float:
        return idf_red * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * length / avg))

    scores = index.scores(["red", "red"])  # a repeated query term counts once
    assert scores[0] == pytest.approx(part(1, 2))
    assert scores[2] == pytest.approx(part(2, 4))
    assert 1 not in scores  # no shared term: not retrieved
    assert index.top(["pear", "red"]) == [1, 2, 0]  # tf 2 beats a shorter tf 1 here
    assert index.top(["unknown"]) == [] and BM25([]).top(["x"]) == []


def test_pack_stays_within_budget_first_fit_and_chronological() -> None:
    items = ["short one", "a much longer line " * 20, "short two", "short three"]
    text, chosen = pack(items, [1, 3, 0, 2], 12)
    assert chosen == [0, 3] or chosen == [0, 2, 3]
    assert count_tokens(text) <= 12
    assert text.splitlines() == [items[i] for i in chosen]  # reading order, not rank order
    ranked, order = pack(items, [3, 0], 100, chronological=False)
    assert order == [3, 0] and ranked == "short three\nshort one"
    assert pack(items, [1], 5) == ("", [])
    assert pack(items, [], 5) == ("", [])


# ------------------------------------------------------------------------------------ LoCoMo data


def test_locomo_loader_on_the_mini_fixture() -> None:
    (conv,) = load_locomo(FIXTURE)
    assert (conv.speaker_a, conv.speaker_b) == ("Maya", "Theo")
    assert [s.number for s in conv.sessions] == [1, 2, 3]  # the empty session 4 is skipped
    assert len(conv.turns) == 18 and conv.turns[0].role == "user" and conv.turns[1].role == "assistant"
    assert conv.turns[6].render() == (
        "[9 March 2024] Maya: I adopted a grey cat yesterday and named her Pebble. "
        "[shares a photo: a photo of a grey cat sleeping on a sofa]"
    )
    assert conv.turns[7].timestamp_ms - conv.turns[6].timestamp_ms == 30_000
    assert [q.category for q in conv.questions] == [4, 4, 4, 2, 1, 4, 4, 3]  # category 5 left out
    assert parse_session_date("12:05 am on 1 January, 2024", "x")[1] == "1 January 2024"


def test_locomo_loader_errors_name_the_field(tmp_path: Path) -> None:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    data[0]["conversation"]["session_2_date_time"] = "yesterday"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"\$\[0\]\.conversation\.session_2_date_time"):
        load_locomo(bad)
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    data[0]["conversation"]["session_1"][2]["text"] = 42
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"\$\[0\]\.conversation\.session_1\[2\]\.text: expected a string"):
        load_locomo(bad)
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(DatasetError, match="cannot read JSON"):
        load_locomo(bad)


# ------------------------------------------------------------------------------------ MADial data


def _write_madial(folder: Path) -> None:
    folder.mkdir()
    dialogues = [
        {
            "dialogue": [
                "<BOD>\n",
                '<Ann>: "I lost my kite today."\n',
                '"Oh no! Where did it go?"\n',  # an untagged line: the assistant (alternation)
                '<Ann>: "Into the big oak in the park."\n',
                '<Assistant>: "Remember flying it at the beach last summer?"\n',
                "<EOD>\n",
            ],
            "test-turn": [4],
            "relevant-id": [1, 2],
            "user-id": 1,
        }
    ]
    memories = [
        {"1": {"time": "2023-07-01", "scene": "Activity", "emotion": "Happy", "event": "Ann flew a kite."}},
        {"2": {"time": "2023-07-02", "scene": "Others", "emotion": "Sad", "event": "Ann lost a red kite."}},
        {"3": {"time": "2023-07-03", "scene": "Others", "emotion": "Happy", "event": "Bo ate a pie."}},
    ]
    (folder / "X-en-dialogue.json").write_text("\n".join(json.dumps(d) for d in dialogues), encoding="utf-8")
    (folder / "X-en-memory.json").write_text("\n".join(json.dumps(m) for m in memories), encoding="utf-8")


def test_madial_loader_queries_and_recall(tmp_path: Path) -> None:
    _write_madial(tmp_path / "en")
    (dialogue,), events = load_madial(tmp_path / "en")
    assert dialogue.lines[1] == ("Assistant", "Oh no! Where did it go?")
    assert dialogue.first_test == 3
    assert queries(dialogue) == {
        "last": "Into the big oak in the park.",
        "user": "I lost my kite today.\nInto the big oak in the park.",
        "context": "Ann: I lost my kite today.\nAssistant: Oh no! Where did it go?\n"
        "Ann: Into the big oak in the park.",
    }
    # No user-id on English memories: an event belongs to the user it names, else to every user.
    assert [(e.id, e.user_id) for e in events] == [(1, 1), (2, 1), (3, 1)]
    by_id = {e.id: e for e in events}
    assert recall(dialogue, "[fact] Ann flew a kite.\n[fact] Bo ate a pie.", by_id) == 0.5
    assert recall(dialogue, "Ann flew a kite and Ann lost a red kite", by_id) == 1.0


def test_split_event_and_recall_of_split_events() -> None:
    long = "First sentence is here. " * 6 + "Last one."
    pieces = split_event(long, limit=60)
    assert all(len(p) <= 60 for p in pieces) and " ".join(pieces) == long.strip()
    assert split_event("x" * 130, limit=60) == ["x" * 60, "x" * 60, "x" * 10]
    event = Event(1, 1, "2023-01-01", "Others", "A" * 150 + ". " + "B" * 100 + ".")
    dialogue = Dialogue(0, 1, [("Ann", "hi")], 1, [1])
    head, tail = split_event(event.text)
    assert recall(dialogue, head, {1: event}) == 0.0  # every piece must be in the block
    assert recall(dialogue, head + "\n" + tail, {1: event}) == 1.0


def test_madial_loader_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"expected one file matching \*-dialogue\.json"):
        load_madial(tmp_path)
    _write_madial(tmp_path / "en")
    (tmp_path / "en" / "X-en-dialogue.json").write_text(
        '{"dialogue": [], "test-turn": "4"}', encoding="utf-8"
    )
    with pytest.raises(DatasetError, match="line 1: test-turn: expected a non-empty list of integers"):
        load_madial(tmp_path / "en")


def test_judge_label_parsing() -> None:
    assert parse_label('Same place. {"label": "CORRECT"}') is True
    assert parse_label('{"label":"wrong"}') is False
    assert parse_label("Different year. WRONG") is False
    assert parse_label("CORRECT or WRONG?") is None
    assert parse_label("") is None


def test_run_madial_both_loads_and_bm25(tmp_path: Path) -> None:
    from benchmarks.recall import run_madial

    _write_madial(tmp_path / "en")
    run = run_madial(tmp_path, langs=("en",), loads=("fragments", "chats"), workdir=tmp_path / "db")
    rows = {(r.mode, r.method): r for r in run.rows}
    assert {m for _, m in rows} == {"convmem", "convmem-chats", "bm25"}
    assert run.fragments == {"en fragments": 3, "en chats": 3}  # 3 fragments / 3 messages stored
    # BM25: the last user line shares no word with an event; all user lines share "kite" with both.
    assert rows[("last", "bm25")].recall == 0.0
    assert rows[("user", "bm25")].recall == 1.0 and rows[("user", "bm25")].hit == 1.0
    for row in run.rows:
        assert 0.0 <= row.recall <= 1.0 and row.dialogues == 1 and row.tokens <= 300
    # Three events fit in 300 tokens: every convmem block of the fragments load holds both.
    assert rows[("context", "convmem")].recall == 1.0
    with pytest.raises(ValueError, match="unknown MADial load 'notes'"):
        run_madial(tmp_path, langs=("en",), loads=("notes",))


def test_chinese_terms_come_from_jieba() -> None:
    pytest.importorskip("jieba", reason="jieba is in the bench extra (pip install -e '.[bench]')")
    from benchmarks.recall_kit.text import tokenize

    assert tokenize("Bart在圣诞节晚会上跳舞，感觉非常开心。")[:4] == ["bart", "在", "圣诞节", "晚会"]
    assert "，" not in tokenize("你好，世界") and tokenize("The red kite!") == ["red", "kite"]


def test_bm25_lines_indexes_the_date_and_the_speaker() -> None:
    (conv,) = load_locomo(FIXTURE)
    index = ConversationIndex(conv)
    # The plain baseline indexes the text alone: only a turn that names Theo (Maya's greeting).
    who = en_words("What did Theo say?")
    assert [conv.turns[i].speaker for i in index.bm25.top(who)] == ["Maya"]
    assert all(conv.turns[i].speaker == "Theo" for i in index.bm25_lines.top(who)[:3])
    when = en_words("What happened on 16 March?")
    assert index.bm25.top(when) == []
    top = index.bm25_lines.top(when)
    # "march" is in every line; "16" only in that day's six.
    assert [index.lines[i][:15] for i in top[:6]] == ["[16 March 2024]"] * 6


def test_run_locomo_reports_each_check(tmp_path: Path) -> None:
    from benchmarks.recall import run_locomo

    run = run_locomo(
        FIXTURE,
        budgets=(60,),
        methods=("bm25", "bm25-lines", "full"),
        workdir=tmp_path,
        checks=("strict", "issue"),
    )
    titles = [t.title for t in run.tables()]
    assert titles == [
        "LoCoMo answer-in-context (strict check), % of questions",
        "LoCoMo answer-in-context (issue check), % of questions",
    ]
    assert {o.label for o in run.outcomes} == {"bm25@60", "bm25-lines@60", "full"}
    for o in run.outcomes:
        assert set(o.found_by) == {"strict", "issue"} and o.found is o.found_by["strict"]
        # The issue check differs from strict on list answers (a comma) only.
        answer = next(q.answer for q in load_locomo(FIXTURE)[0].questions if q.index == o.question)
        if "," not in answer:
            assert o.found_by["issue"] is o.found_by["strict"]
    with pytest.raises(ValueError, match="unknown check"):
        run_locomo(FIXTURE, methods=("full",), workdir=tmp_path, checks=("loose",))
