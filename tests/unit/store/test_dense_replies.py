"""A turn found by meaning brings the other speaker's reply, and the reply ranks by what found it.

The words' search adds the other voice's next turn to a found turn (``reply_to``): "How did you
feel when you heard?" is what matches, the answer is in the reply. The search by meaning does the
same, and in the block a reply inherits its share of its turn's *fused* score, so a question found
by meaning alone lifts its answer as a question found by words does.
"""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text

from convmem_graph.models import EpisodeHit, EpisodeSearch, MemorySnapshot, Message
from convmem_graph.payloads import MemoryBlockOptions, build_memory_block
from convmem_graph.store import MemoryStore, _vectors, migrations
from convmem_graph.store._vectors import dense_episodes

T0 = 1_709_460_000_000
MODEL = "axes"

#: (role, text): each turn's vector is its own axis, so a query's weights order the turns.
TURNS = [
    ("user", "The rain kept us inside all weekend."),
    ("assistant", "Tell me about the first night in the new flat."),
    ("user", "Noisy neighbours, but I slept fine in the end."),
    ("user", "Also the kettle broke again."),
    ("assistant", "Kettles never last, sadly."),
    ("user", "Then I will buy a better one."),
]


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable path even on a server with pgvector: the migration finds no extension."""
    monkeypatch.setattr(migrations, "enable_pgvector", lambda conn: False)
    monkeypatch.setattr(_vectors, "pgvector_schema", lambda conn: None)


def _store(url: str) -> tuple[MemoryStore, list[int]]:
    store = MemoryStore.from_url(url)
    store.ensure_memory("m")
    store.add_messages(
        "m",
        [
            Message(
                id=f"t{i}",
                role=role,  # type: ignore[arg-type]
                content=body,
                channel="im",
                source="message",
                timestamp_ms=T0 + i * 60_000,
            )
            for i, (role, body) in enumerate(TURNS)
        ],
    )
    with store.read() as conn:
        seqs = [
            int(s)
            for (s,) in conn.execute(
                text("SELECT seq FROM cm_messages WHERE memory_id = :m ORDER BY seq"), {"m": "m"}
            )
        ]
    axes = np.eye(len(TURNS))
    store.save_turn_vectors("m", MODEL, [(s, axes[i].tolist()) for i, s in enumerate(seqs)])
    return store, seqs


def _found(url: str, weights: list[float], limit: int) -> list[tuple[int, int | None]]:
    store, seqs = _store(url)
    try:
        with store.read() as conn:
            found = dense_episodes(conn, "m", MODEL, weights, limit=limit)
    finally:
        store.close()
    index = {s: i for i, s in enumerate(seqs)}
    # Turn numbers (as in TURNS) of each hit and of the turn it replies to.
    return [(index[h.seq], None if h.reply_to is None else index[h.reply_to]) for h in found.hits]


@pytest.mark.usefixtures("portable")
def test_a_turn_found_by_meaning_brings_the_other_voices_reply(backend_url: str) -> None:
    # The assistant's question is the best of three found; the user's answer follows it. Only the
    # best third of the found turns bring a reply, as the words' search does.
    assert _found(backend_url, [0.1, 1.0, 0.0, 0.0, 0.3, 0.2], limit=3) == [
        (1, None),
        (4, None),
        (5, None),
        (2, 1),
    ]


@pytest.mark.usefixtures("portable")
def test_the_reply_is_the_next_turn_of_the_other_voice(backend_url: str) -> None:
    # After the user's flat turn comes the user's kettle turn (same voice), then the assistant's.
    assert _found(backend_url, [0.2, 0.0, 1.0, 0.3, 0.0, 0.0], limit=3) == [
        (2, None),
        (3, None),
        (0, None),
        (4, 2),
    ]
    # A reply found by meaning itself is not added again.
    assert _found(backend_url, [0.0, 1.0, 0.5, 0.0, 0.0, 0.1], limit=3) == [(1, None), (2, None), (5, None)]


def _message(i: int, role: str, body: str) -> Message:
    return Message(
        id=f"t{i}",
        memory_id="m",
        role=role,  # type: ignore[arg-type]
        content=body,
        channel="im",
        source="message",
        timestamp_ms=T0 + i * 3_600_000,
    )


def test_a_reply_inherits_from_the_fused_score_of_the_turn_found_by_meaning() -> None:
    # The query shares no word with the question or its answer; the question is the best by
    # meaning. Two turns share a word of the query and are found by words, weakly.
    query = "Any trouble sleeping lately?"
    question = _message(1, "assistant", "Tell me about the first night in the new flat.")
    answer = _message(2, "user", "Noisy neighbours, but it all turned out fine in the end.")
    weak = [
        _message(3, "user", "Lately the bakery closes at noon, which is a pity for the whole street."),
        _message(4, "user", "The cinema was full lately, we queued for an hour and gave up."),
    ]
    hits = [
        EpisodeHit(seq=3, message=weak[0], terms=["lately"]),
        EpisodeHit(seq=4, message=weak[1], terms=["lately"]),
        EpisodeHit(seq=1, message=question),
        EpisodeHit(seq=2, message=answer, reply_to=1),
    ]
    episodes = EpisodeSearch(
        terms=["trouble", "sleeping", "lately"],
        document_frequency={"lately": 2},
        total=40,
        hits=hits,
        dense={1: 0.95, 3: 0.10, 4: 0.05, 5: 0.30, 6: 0.20},
    )
    block = build_memory_block(
        MemorySnapshot(memory_id="m", episodes=episodes), MemoryBlockOptions(query=query, budget_tokens=400)
    )
    # Not a question, so no question-answer unit: the answer is quoted on the score it inherits.
    assert {"t1", "t2", "t3", "t4"} <= set(block.included_turn_ids)
