"""Live truth: what the server stores from webhooks is what one file ingest of the same deliveries stores.

The turns, the facts and the summary, whatever order the deliveries arrive in (vendor retries
included) and wherever the worker's batches cut the stream. The worker's thread is not started:
the test posts each signed delivery through the HTTP route and runs the real worker's batches
itself after a drawn subset of the posts, so every cut a loaded server could make (a 902 taken
alone, before late 903s, parked with a 904, retries in other batches) is drawn, not left to
timing. ``test_webhooks.py::test_signed_call_out_of_order_with_retries_equals_file_ingest`` is
one such order, batched by whatever the thread's timing was.

Each example's call gets new user, task and room ids in one served database (a new database per
example would cost more than the example); the reference is one file ingest of the fixture.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph import ConvMemory, MemoryConfig
from convmem_graph.server.app import create_app
from convmem_graph.server.served import open_served_memory
from convmem_graph.signatures import sign_agora_v2, sign_trtc
from convmem_graph.state import RawInput
from tests.conftest import load_fixture
from tests.unit.server.conftest import AGORA_SECRET, BOT, TRTC_KEY, make_settings
from tests.unit.server.test_trtc_live_any_order import BOT as SCRIPT_BOT
from tests.unit.server.test_trtc_live_any_order import CallIds, Round, deliveries

_CALL = load_fixture("trtc_callbacks_one_call.json")
_HUMAN = "u_10086"
_TASK = json.loads(_CALL["deliveries"][0]["raw_body"])["EventInfo"]["TaskId"]
_AGORA = load_fixture("agora_webhook_103_agent_history.json")
_IDS = itertools.count()
#: The fixture's bot and the scripted calls' bot (``CONVMEM_BOT_IDS`` of the server and of the reference).
_BOTS = [BOT, SCRIPT_BOT]

#: What one served memory holds: turns (role, spoken text, generated text, cut short), facts, summary.
Stored = tuple[list[tuple[str, str, str | None, bool]], list[str], str | None]


def _stored(mem: ConvMemory, memory_id: str) -> Stored:
    turns = [(m.role, m.content, m.original, m.interrupted) for m in mem.recent(memory_id, 100)]
    facts = sorted(f.content for f in mem.fragments(memory_id))
    summary = mem.summary(memory_id)
    return turns, facts, None if summary is None else summary.text


def _file_ingest(memory_id: str, payload: Any, source: str | None) -> Stored:
    """The reference: every delivery in one run, the session ended (``convmem ingest --session-ended``)."""
    with ConvMemory.open(":memory:", config=MemoryConfig(bot_ids=_BOTS)) as ref:
        ref.ingest(memory_id, payload, source=source, session_ended=True)
        return _stored(ref, memory_id)


class Served:
    """The app on one database, its worker driven by the test (no background thread)."""

    def __init__(self, tmp: Path) -> None:
        self.settings = make_settings(tmp, bot_ids=_BOTS)
        self.mem = open_served_memory(self.settings)
        self.app = create_app(self.settings, mem=self.mem)
        # Not entered as a context manager: the lifespan, which starts the worker's thread, never runs.
        self.client = TestClient(self.app)
        self.worker = self.app.state.worker

    def drain(self) -> None:
        """Run the worker's batches until nothing is left to take (bounded: each takes what is pending)."""
        for _ in range(50):
            if self.worker.run_once() == 0:
                return
        raise AssertionError("the worker still had work after 50 batches")

    def deliver(
        self, docs: list[dict[str, Any]], order: list[tuple[int, bool]], cuts: list[bool], vendor: str
    ) -> None:
        """Post ``docs`` in ``order`` (a retry resent later gets a later vendor clock), running the
        worker's batches after each post ``cuts`` marks, and once more at the end."""
        post, clock = (self.post_trtc, "CallbackTs") if vendor == "trtc" else (self.post_agora, "notifyMs")
        for (i, later), cut in zip(order, cuts, strict=True):
            doc = json.loads(json.dumps(docs[i]))
            if later:
                doc[clock] += 10_000
            post(doc)
            if cut:
                self.drain()
        self.drain()

    def post_trtc(self, doc: dict[str, Any]) -> None:
        raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "SdkAppId": "1400000000",
            "Sign": sign_trtc(raw, TRTC_KEY),
        }
        assert self.client.post("/webhooks/trtc", content=raw, headers=headers).status_code == 200

    def post_agora(self, doc: dict[str, Any]) -> None:
        raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET)}
        assert self.client.post("/webhooks/agora", content=raw, headers=headers).status_code == 200


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    app = Served(tmp_path_factory.mktemp("served"))
    try:
        yield app
    finally:
        app.mem.close()


@pytest.fixture(scope="module")
def trtc_reference() -> Stored:
    return _file_ingest(_HUMAN, {"deliveries": _CALL["deliveries"]}, "trtc")


def _renamed(raw: str, n: int) -> dict[str, Any]:
    """A fixture delivery of call ``n``: the same words, new user, task and room ids."""
    return json.loads(raw.replace(_HUMAN, f"{_HUMAN}-{n}").replace(_TASK, f"{_TASK}-{n}"))


def _round_of(raw: str) -> str | None:
    payload = json.loads(raw)["EventInfo"]["Payload"]
    return payload.get("RoundId") or payload.get("Tag", {}).get("RoundId")


@st.composite
def arrivals(draw: st.DrawFn, count: int) -> tuple[list[tuple[int, bool]], list[bool]]:
    """Arrival order of ``count`` deliveries and retries, and after which posts the worker runs.

    Each arrival is ``(delivery, resent later)``: a retry is the same event again, as sent or
    with a later ``CallbackTs``. ``cuts[k]`` runs the worker's batches after the k-th post (the
    last post is always followed by a drain).
    """
    retries = draw(st.lists(st.tuples(st.integers(0, count - 1), st.booleans()), max_size=6))
    order = draw(st.permutations([(i, False) for i in range(count)] + retries))
    # Few cuts (one batch takes many deliveries, a loaded server) to one per post (an idle one).
    density = draw(st.sampled_from([0.0, 0.1, 0.3, 0.7, 1.0]))
    cuts = draw(st.lists(st.floats(0, 1), min_size=len(order), max_size=len(order)))
    return order, [c < density for c in cuts]


def served_trtc_call(served: Served, order: list[tuple[int, bool]], cuts: list[bool]) -> Stored:
    """Post the fixture call's deliveries in ``order`` as a new call, running the worker at ``cuts``."""
    n = next(_IDS)
    bodies = [d["raw_body"] for d in _CALL["deliveries"]]
    served.deliver([_renamed(body, n) for body in bodies], order, cuts, "trtc")
    assert served.worker.inbox.pending_count == 0
    assert served.worker.inbox.waiting(f"{_TASK}-{n}") == [], "a delivery was left parked"
    return _stored(served.mem, f"{_HUMAN}-{n}")


@settings(max_examples=20, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrival=arrivals(len(_CALL["deliveries"])))
def test_a_served_trtc_call_equals_its_file_ingest_in_any_order_and_batching(
    served: Served, trtc_reference: Stored, arrival: tuple[list[tuple[int, bool]], list[bool]]
) -> None:
    order, cuts = arrival
    turns, facts, summary = served_trtc_call(served, order, cuts)
    ref_turns, ref_facts, ref_summary = trtc_reference
    assert turns == ref_turns
    assert facts == ref_facts
    assert summary == ref_summary


def test_a_902_taken_with_nothing_to_store_still_ends_the_session(
    served: Served, trtc_reference: Stored
) -> None:
    # The 902 and a 904 first, in a batch of their own (the 902 waits for the 904 that names the
    # human): nothing is stored then, and the turns coming after are still the ended call's.
    end, start_of_round = len(_CALL["deliveries"]) - 1, 3
    rest = [i for i in range(len(_CALL["deliveries"])) if i not in (end, start_of_round)]
    order = [(end, False), (start_of_round, False)] + [(i, False) for i in rest]
    assert served_trtc_call(served, order, [False, True] + [True] * len(rest)) == trtc_reference


#: Sentences the rules take a fact from (so facts and the summary have something to differ on),
#: and short ones they take none from; a round's sentences are joined into one turn.
HUMAN_SAYS = [
    "我对芒果过敏。",
    "我住在杭州。",
    "我住在上海。",
    "I like green tea.",
    "我是一名护士。",
    "嗯。",
    "好的。",
    "明天要去上海出差。",
]
BOT_SAYS = ["好的，我记住了。", "嗯嗯，", "那太棒了！", "Sounds great."]


@st.composite
def scripted_calls(draw: st.DrawFn) -> list[Round]:
    """1-3 rounds of 1-2 human and 1-3 bot sentences, some cut short by an interruption metric."""
    rounds = []
    for i in range(draw(st.integers(1, 3))):
        bot = draw(st.lists(st.sampled_from(BOT_SAYS), min_size=1, max_size=3))
        metric = draw(st.booleans()) and len(bot) > 1
        rounds.append(
            Round(
                round_id=f"r-{i:03d}",
                human=draw(st.lists(st.sampled_from(HUMAN_SAYS), min_size=1, max_size=2)),
                bot=bot,
                spoken=draw(st.integers(1, len(bot) - 1)) if metric else len(bot),
                has_905=metric or draw(st.booleans()),
                interrupted_by=draw(st.sampled_from([906, 908])) if metric else None,
            )
        )
    return rounds


@settings(max_examples=100, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=scripted_calls(), data=st.data())
def test_a_served_scripted_call_equals_its_file_ingest_in_any_order_and_batching(
    served: Served, rounds: list[Round], data: st.DataObject
) -> None:
    ids = CallIds()
    bodies = deliveries(rounds, ids)
    order, cuts = data.draw(arrivals(len(bodies)))
    assert served_scripted_call(served, ids, bodies, order, cuts) == _file_ingest(
        ids.human, {"deliveries": bodies}, "trtc"
    )


def served_scripted_call(
    served: Served,
    ids: CallIds,
    bodies: list[dict[str, Any]],
    order: list[tuple[int, bool]],
    cuts: list[bool],
) -> Stored:
    """Post a scripted call's ``bodies`` in ``order``, running the worker's batches at ``cuts``."""
    served.deliver(bodies, order, cuts, "trtc")
    assert served.worker.inbox.waiting(ids.task) == [], "a delivery was left parked"
    return _stored(served.mem, ids.human)


def test_a_round_after_the_902_batch_refreshes_the_ended_sessions_summary(served: Served) -> None:
    # The call up to its end (902 included) in one batch; its last round's copies come after,
    # one batch each (late, or cut off by the batch boundary): that round's fact is in the summary.
    rounds = [
        Round("r-000", ["我住在杭州。"], ["好的，我记住了。"], 1, True, None),
        Round("r-001", ["I like green tea."], ["Sounds great."], 1, True, None),
    ]
    ids = CallIds()
    bodies = deliveries(rounds, ids)
    last = [i for i, b in enumerate(bodies) if b["EventInfo"]["Payload"].get("RoundId") == "r-001"]
    first = [i for i in range(len(bodies)) if i not in last]
    order = [(i, False) for i in first + last]
    cuts = [False] * (len(first) - 1) + [True] * (len(last) + 1)
    turns, facts, summary = served_scripted_call(served, ids, bodies, order, cuts)
    assert (turns, facts, summary) == _file_ingest(ids.human, {"deliveries": bodies}, "trtc")
    assert summary is not None and "green tea" in summary


#: Replies of the Agora agent (its sentences carry no fact).
AGORA_REPLIES = ["好的，我记住了。", "那太棒了！", "Sounds great."]


@st.composite
def agora_calls(draw: st.DrawFn) -> list[list[tuple[str, str]]]:
    """1-3 calls of one person, each 1-3 turns of (what the person said, what the agent answered)."""
    turn = st.tuples(st.sampled_from(HUMAN_SAYS), st.sampled_from(AGORA_REPLIES))
    return draw(st.lists(st.lists(turn, min_size=1, max_size=3), min_size=1, max_size=3))


def agora_103(memory_id: str, n: int, k: int, turns: list[tuple[str, str]]) -> dict[str, Any]:
    """The 103 (agent history, sent when the agent leaves) of the person's ``k``-th call, a day apart."""
    start = _AGORA["payload"]["start_ts"] * 1000 + k * 86_400_000
    contents = []
    for j, (said, answered) in enumerate(turns):
        ms = start + 1_000 + j * 6_000
        contents.append({"role": "user", "content": said, "speech_start_ms": ms, "speech_end_ms": ms + 1_500})
        contents.append(
            {
                "role": "assistant",
                "content": answered,
                "speech_start_ms": ms + 3_000,
                "speech_end_ms": ms + 4_500,
            }
        )
    stop = start + 2_000 + len(turns) * 6_000
    payload = {
        **_AGORA["payload"],
        "agent_id": f"agent-{n}-{k}",
        "channel": f"convmem_{n}_{k}",
        "start_ts": start // 1000,
        "stop_ts": stop // 1000,
        "contents": contents,
        "labels": {"memory_id": memory_id},
    }
    return {**_AGORA, "noticeId": f"{n}:{k}:103", "notifyMs": stop + 4_000, "payload": payload}


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=agora_calls(), data=st.data())
def test_served_agora_calls_equal_their_file_ingest_in_any_order_and_batching(
    served: Served, calls: list[list[tuple[str, str]]], data: st.DataObject
) -> None:
    # The same person's calls, each one 103 (NCS resends a notice with its noticeId: one row).
    n = next(_IDS)
    memory_id = f"mem-agora-{n}"
    docs = [agora_103(memory_id, n, k, turns) for k, turns in enumerate(calls)]
    order, cuts = data.draw(arrivals(len(docs)))
    served.deliver(docs, order, cuts, "agora")
    assert _stored(served.mem, memory_id) == _file_ingest(
        memory_id, [RawInput(d, "agora") for d in docs], None
    )
