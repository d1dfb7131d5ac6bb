"""Issue 20, items 1-3: a live TRTC call comes out the same whatever order its copies arrive in.

Scripted calls (a greeting or not, 1-3 rounds of 1-2 human and 1-3 bot sentences, repeated short replies
such as "好的", rounds cut short by an interruption metric sent as its own webhook - 906 or 908 -
with a 905 naming what was spoken, noise metrics, vendor retries, 902) are delivered to the inbox
in a random order, in batches of random sizes, and the real worker runs after each batch: one
batch per webhook is how a live server sees them. Three deployments: ``CONVMEM_BOT_IDS`` set;
the call registered at start (bot and human known, ``task`` mapping); nothing known (``room``
mapping: the worker learns the bot from a 905 and the human from a 904 and parks the rest).
In half of the calls every round also goes through the memory proxy (its copy of the user's
text and of the streamed answer, carrying the task id and when its request was open; in half of
those TRTC sends the bot's sentences only after the stream closed, so no answer matches its
round by time and only its words and the round's human turn link them); in half
of the rounds TRTC hung up on that stream (the proxy's answer is cut, its text runs past the
round's sentences, with or without an interruption metric: the round is interrupted and the
streamed text is its ``original``), and in half of the calls every answer starts with the same
"好的。", so a cut answer's text also starts other rounds' (only the request's time names its
round: carrying the cut to any round with those words marks the welcome message). Up to three
lines are typed in IM around the call (one pull each, the same short words within seconds of a
round), and in a third of them the same person's earlier Agora call (its 103, a webhook, and
in half of those its GET history, pulled; checked against one run over the same documents, as
their own test does; in half of them its two model turns also went through the proxy, tagged
with the call's channel, the second answer cut off: its 103 copy then becomes interrupted with
the generated text as ``original``, as the history says): all copies are shuffled together.
2,000 examples run the real worker with each run stopping at the stored timeline (one database
per deployment, new ids per call, ~50 ms an example); 40 more run the whole lifecycle.

The stored timeline is compared with the script, not with another read: every utterance once,
the right role, the spoken text, the generated text as ``original`` when it was cut short,
``interrupted``, the round, the first sentence's time and the source (``greeting`` for the welcome
message even when it is delivered alone, decided by the store: ``store._rounds``).
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph._copies import CLOCK_SKEW_MS
from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message, ReadResult
from convmem_graph.server.inbox import Delivery, Inbox, TaskInfo
from convmem_graph.server.routing import trtc_fields
from convmem_graph.server.settings import ServeSettings
from convmem_graph.server.webhooks import delivery_key
from convmem_graph.server.worker import InboxWorker
from convmem_graph.sources import merge_timeline, read_payload
from convmem_graph.state import RawInput
from convmem_graph.text.sentences import join_sentences

BOT = "ai_bot_7"
_CALLS = itertools.count()
T0 = 1_767_300_000_000
HUMAN_SAYS = [
    "好的。",
    "嗯。",
    "对。",
    "我今天跑了五公里。",
    "明天要去上海出差。",
    "I like green tea.",
    "好的",
]
BOT_SAYS = ["好的。", "嗯嗯，", "那太棒了！", "记得多喝水。", "上海最近有点冷，", "Sounds great.", "好的"]

Deployment = Literal["bot_ids", "registered", "unknown"]


@dataclass(frozen=True)
class CallIds:
    """The ids of one call (new for every example, so examples can share a database)."""

    n: int = field(default_factory=lambda: next(_CALLS))

    @property
    def human(self) -> str:
        return f"u_{self.n}"

    @property
    def task(self) -> str:
        return f"task-{self.n}"

    @property
    def room(self) -> str:
        return f"room-{self.n}"

    def memory_id(self, deployment: Deployment) -> str:
        return {"bot_ids": self.human, "registered": f"mem-{self.n}", "unknown": self.room}[deployment]


@dataclass
class Round:
    """One scripted round: the human's sentences (none for a greeting) and the bot's."""

    round_id: str
    human: list[str]
    bot: list[str]
    spoken: int  # bot sentences spoken before the end (== len(bot) unless interrupted)
    has_905: bool
    interrupted_by: int | None  # 906 or 908 carrying the interruption metric, or None
    #: TRTC hung up on the proxy's stream (the human barged in): the proxy's answer is cut,
    #: streamed up to ``tail``, words that never became a sentence TRTC spoke or sent.
    hung_up: bool = False
    tail: str = ""


def _body(ids: CallIds, event: int, ms: int, payload: dict[str, Any]) -> dict[str, Any]:
    info = {"EventMsTs": ms, "TaskId": ids.task, "RoomId": ids.room, "RoomIdType": 1, "Payload": payload}
    return {"EventGroupId": 9, "EventType": event, "CallbackTs": ms + 30, "EventInfo": info}


#: What a stream cut short had generated past its last whole sentence.
TAILS = ["还有，", "and then", "另外"]


@st.composite
def calls(draw: st.DrawFn) -> list[Round]:
    rounds: list[Round] = []
    if draw(st.booleans()):
        rounds.append(Round("r-welcome", [], [draw(st.sampled_from(BOT_SAYS))], 1, True, None))
    # Repeated words: every answer starts with the same "好的。" (a cut answer's text then starts
    # another round's as well, and only the request's time tells them apart).
    repeat = draw(st.booleans())
    for i in range(draw(st.integers(1, 3))):
        bot = draw(st.lists(st.sampled_from(BOT_SAYS), min_size=1, max_size=3))
        if repeat:
            bot = ["好的。", *bot[1:]]  # as long as drawn: the calls cost what they did
        metric = draw(st.booleans()) and len(bot) > 1
        hung_up = draw(st.booleans())
        cut = (metric or hung_up) and len(bot) > 1
        rounds.append(
            Round(
                round_id=f"r-{i:03d}",
                human=draw(st.lists(st.sampled_from(HUMAN_SAYS), min_size=1, max_size=2)),
                bot=bot,
                spoken=draw(st.integers(1, len(bot) - 1)) if cut else len(bot),
                # An interrupted round always says what was spoken; a whole one may not.
                has_905=metric or draw(st.booleans()),
                interrupted_by=draw(st.sampled_from([906, 908])) if metric else None,
                hung_up=hung_up,
                tail=draw(st.sampled_from(TAILS)) if hung_up else "",
            )
        )
    return rounds


def _proxy_turn(ids: CallIds, rnd: Round, user_ms: int, answer_ms: int, closed_ms: int) -> dict[str, Any]:
    """The memory proxy's copy of a round (TRTC sent the LLM request through it), as it stores it."""
    request_id = f"req-{ids.n}-{rnd.round_id}"
    meta = {"proxy_request_id": request_id, "task_id": ids.task}
    messages = [
        Message(
            id=f"proxy-{request_id}-user",
            role="user",
            content=join_sentences(rnd.human),
            channel="api",
            source="message",
            timestamp_ms=user_ms,
            metadata=dict(meta),
        ),
        Message(
            # The generated answer as streamed: cut short, past its last sentence, when TRTC hung up.
            id=f"proxy-{request_id}-assistant",
            role="assistant",
            content=join_sentences([*rnd.bot, rnd.tail] if rnd.hung_up else rnd.bot),
            channel="api",
            source="llm",
            timestamp_ms=answer_ms,
            interrupted=rnd.hung_up,
            # When the request was sent and its stream closed (the proxy's clock).
            metadata={**meta, "request_ms": user_ms, "answered_ms": closed_ms},
        ),
    ]
    return {
        "proxy": {"messages": [m.model_dump(mode="json") for m in messages]},
        "request_id": request_id,
        "call": "trtc",
    }


#: How long a late answer's stream stays open (``late`` deliveries): its round's sentences come after.
STREAM_MS = 300


def deliveries(
    rounds: list[Round], ids: CallIds, *, proxy: bool = False, late: bool = False
) -> list[dict[str, Any]]:
    """The call's webhook bodies in the order TRTC would send them (and the proxy's copies).

    With ``late``, TRTC sends a round's bot sentences only after the proxy's stream of it closed
    (as they are spoken, after the round, or at a barge-in: the spec does not say when): the
    first is just past the request's span plus the clock skew, so no round matches an answer
    by time and only its words link it (``convmem_graph._copies.text_fallback_round``).
    """
    out: list[dict[str, Any]] = []
    ms = T0
    for rnd in rounds:
        if rnd.human:
            ms += 700
            out.append(_body(ids, 904, ms, {"UserId": ids.human, "RoundId": rnd.round_id}))
        for text in rnd.human:
            ms += 900
            out.append(_body(ids, 903, ms, {"UserId": ids.human, "Text": text, "RoundId": rnd.round_id}))
        ms += 150
        out.append(
            _body(ids, 906, ms, {"Metric": "llm_first_token", "Value": 412, "Tag": {"RoundId": rnd.round_id}})
        )
        sent = ms
        late_round = late and proxy and bool(rnd.human)
        if late_round:
            ms = sent + STREAM_MS + CLOCK_SKEW_MS + 1 - 800  # the first sentence: 1 ms past the span
        for text in rnd.bot:
            ms += 800
            out.append(_body(ids, 903, ms, {"UserId": BOT, "Text": text, "RoundId": rnd.round_id}))
        if late_round:
            turn = _proxy_turn(ids, rnd, user_ms=sent + 60, answer_ms=sent + 150, closed_ms=sent + STREAM_MS)
            out.append(turn)
        elif proxy and rnd.human:
            # The stream stays open while TRTC makes the round's sentences of it.
            out.append(_proxy_turn(ids, rnd, user_ms=sent + 60, answer_ms=sent + 500, closed_ms=ms + 100))
        if rnd.has_905:
            ms += 600
            spoken = join_sentences(rnd.bot[: rnd.spoken])
            out.append(_body(ids, 905, ms, {"UserId": BOT, "Text": spoken, "RoundId": rnd.round_id}))
        if rnd.interrupted_by is not None:
            ms += 40
            tag = {"RoundId": rnd.round_id} | (
                {"Code": 0, "Message": ""} if rnd.interrupted_by == 908 else {}
            )
            out.append(_body(ids, rnd.interrupted_by, ms, {"Metric": "interruption", "Value": 1, "Tag": tag}))
    out.append(_body(ids, 902, ms + 5000, {"LeaveCode": 0}))
    return out


IM_BOT = "@RBT#xiaoyu"
_VENDORS = Path(__file__).resolve().parents[2] / "fixtures"
#: An earlier Agora call of the same person: its GET history (pulled) and its 103 (a webhook).
AGORA_HISTORY = json.loads((_VENDORS / "agora_history_response.json").read_text(encoding="utf-8"))
AGORA_103 = json.loads((_VENDORS / "agora_webhook_103_agent_history.json").read_text(encoding="utf-8"))


def _agora_reference(docs: list[Any]) -> list[tuple[Any, ...]]:
    """The Agora call's messages from one run over ``docs`` (their own test checks that run)."""
    mem = ConvMemory.open(":memory:")
    try:
        mem.ingest("u_agora", [RawInput(doc, "agora") for doc in docs])
        return [
            (m.role, m.content, m.original, m.interrupted, m.round_id, m.timestamp_ms, m.source)
            for m in mem.store.recent_messages("u_agora", 1_000)
        ]
    finally:
        mem.close()


AGORA_ROWS = _agora_reference([AGORA_HISTORY, AGORA_103])
#: The 103 alone: it carries no ``interrupted`` or ``original``, so its cut answer is plain.
AGORA_103_ROWS = _agora_reference([AGORA_103])
#: The cut answer of the Agora call: what was spoken, and what the model generated (history).
AGORA_CUT = next(item for item in AGORA_HISTORY["contents"] if item.get("metadata", {}).get("interrupted"))
AGORA_CHANNEL = AGORA_103["payload"]["channel"]


def agora_proxy_turns(ids: CallIds) -> list[dict[str, Any]]:
    """The memory proxy's copies of the Agora call's two model turns (``convmem_call`` names the channel).

    The second answer is the one the user cut off: Agora hung up on its stream, so the proxy's copy
    holds the whole generated text, interrupted; the request was open while it was spoken.
    """
    out = []
    items = AGORA_HISTORY["contents"]
    for k, (asked, answered, closed_ms) in enumerate([(1, 2, 1_767_268_811_000), (3, 4, 1_767_268_827_390)]):
        request_id = f"agora-req-{ids.n}-{k}"
        meta = {"proxy_request_id": request_id, "rtc_channel": AGORA_CHANNEL}
        sent = items[asked]["timestamp"] + 70
        answer = items[answered]
        cut = bool(answer.get("metadata", {}).get("interrupted"))
        messages = [
            Message(
                id=f"proxy-{request_id}-user",
                role="user",
                content=items[asked]["content"],
                channel="api",
                source="message",
                timestamp_ms=sent,
                metadata=dict(meta),
            ),
            Message(
                id=f"proxy-{request_id}-assistant",
                role="assistant",
                content=answer["metadata"]["original"] if cut else answer["content"],
                channel="api",
                source="llm",
                timestamp_ms=sent + 500,
                interrupted=cut,
                metadata={**meta, "request_ms": sent, "answered_ms": closed_ms},
            ),
        ]
        body = {"messages": [m.model_dump(mode="json") for m in messages]}
        out.append({"proxy": body, "request_id": request_id, "call": "agora"})
    return out


def im_pages(ids: CallIds, lines: list[tuple[int, bool, str]]) -> list[dict[str, Any]]:
    """One IM ``admin_getroammsg`` pull per line typed around the call: (second offset, by bot, text)."""
    out = []
    for k, (offset_s, by_bot, text) in enumerate(lines):
        ts = T0 // 1000 + offset_s
        sender, peer = (IM_BOT, ids.human) if by_bot else (ids.human, IM_BOT)
        item = {
            "From_Account": sender,
            "To_Account": peer,
            "MsgSeq": 100 + k,
            "MsgRandom": 7000 + k,
            "MsgTimeStamp": ts,
            "MsgKey": f"{100 + k}_{7000 + k}_{ts}",
            "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": text}}],
        }
        response = {"ActionStatus": "OK", "ErrorCode": 0, "ErrorInfo": "", "Complete": 1, "MsgList": [item]}
        request = {"Operator_Account": ids.human, "Peer_Account": IM_BOT, "MaxCnt": 100}
        out.append(
            {"im": {"pages": [{"request": request, "response": response}]}, "line": (ts, by_bot, text)}
        )
    return out


def expected(rounds: list[Round], bodies: list[dict[str, Any]], ids: CallIds) -> list[tuple[Any, ...]]:
    """What happened, from the script: (role, spoken text, original, interrupted, round, time, source).

    The source of a bot turn is ``greeting`` for the welcome message (before the human's first
    turn of the call), ``llm`` for the others.
    """
    first: dict[tuple[str, str], int] = {}
    rows: list[tuple[Any, ...]] = []
    agora = {body["kind"] for body in bodies if "agora" in body}
    if "history" in agora:
        rows.extend(AGORA_ROWS)  # the history knows the cut answer's original itself
    elif agora:
        through_proxy = any(body.get("call") == "agora" for body in bodies)
        for row in AGORA_103_ROWS:
            if through_proxy and row[:2] == ("assistant", AGORA_CUT["content"]):
                # The proxy's copy of the cut answer: interrupted, the generated text as original.
                row = (*row[:2], AGORA_CUT["metadata"]["original"], True, *row[4:])
            rows.append(row)
    for body in bodies:
        if "agora" in body:
            continue
        if "im" in body:
            ts, by_bot, text = body["line"]
            rows.append(("assistant" if by_bot else "user", text, None, False, None, ts * 1000, "message"))
            continue
        if "proxy" in body:
            continue  # a copy: what happened is what the call's voice channel says
        payload = body["EventInfo"]["Payload"]
        if body["EventType"] == 903:
            first.setdefault((payload["RoundId"], payload["UserId"]), body["EventInfo"]["EventMsTs"])
    for rnd in rounds:
        if rnd.human:
            rows.append(
                (
                    "user",
                    join_sentences(rnd.human),
                    None,
                    False,
                    rnd.round_id,
                    first[(rnd.round_id, ids.human)],
                    "asr",
                )
            )
        generated = join_sentences(rnd.bot)
        spoken = join_sentences(rnd.bot[: rnd.spoken]) if rnd.has_905 else generated
        # Interrupted when the metric says so or the proxy's stream of the round was cut; the
        # generated text is then the stream's, which runs past the round's sentences.
        proxy_cut = rnd.hung_up and bool(rnd.human) and any(body.get("call") == "trtc" for body in bodies)
        if proxy_cut:
            generated = join_sentences([*rnd.bot, rnd.tail])
        cut = rnd.interrupted_by is not None or proxy_cut
        original = generated if cut and generated != spoken else None
        source = "llm" if rnd.human else "greeting"  # only the welcome round has no human turn
        rows.append(("assistant", spoken, original, cut, rnd.round_id, first[(rnd.round_id, BOT)], source))
    return sorted(rows, key=lambda r: (r[5], r[0], r[1], r[4] or ""))


class TimelineWorker(InboxWorker):
    """The real worker (routing, parking), each run stopping at the stored timeline.

    A run is the lifecycle's ingest and normalize steps - read every input, merge the batch,
    store it - without extraction and summaries, which read the timeline and never change it:
    ~10x cheaper, so thousands of arrival orders fit in CI's budget.
    """

    def _ingest(self, memory_id: str, deliveries: list[Delivery], tasks: dict[str, TaskInfo]) -> None:
        inputs, _ended = self._inputs(deliveries, tasks)
        self.store_inputs(memory_id, [(i.data, i.source) for i in inputs])

    def store_inputs(self, memory_id: str, inputs: list[tuple[Any, str | None]]) -> None:
        """Read, merge and store ``(payload, source)`` inputs as the lifecycle's first two steps do."""
        config = self.mem.config
        # As the ingest node does: a proxy turn comes already read.
        read = [
            data
            if isinstance(data, ReadResult)
            else read_payload(data, source, bot_ids=config.bot_ids, config=config)
            for data, source in inputs
        ]
        messages, _dropped = merge_timeline(read, dedupe_window_ms=config.dedupe_window_ms)
        for m in messages:
            m.memory_id = memory_id
        interruptions = sorted({pair for result in read for pair in result.interruptions})
        self.mem.store.add_messages(
            memory_id, messages, dedupe_window_ms=config.dedupe_window_ms, interruptions=interruptions
        )


def _serve_settings(db: str, deployment: Deployment) -> ServeSettings:
    return ServeSettings(
        _env_file=None,
        db=db,
        bot_ids=[BOT] if deployment == "bot_ids" else [],
        trtc_memory_from={"bot_ids": "user", "registered": "task", "unknown": "room"}[deployment],
    )


def _open(serve: ServeSettings) -> ConvMemory:
    return ConvMemory.open(serve.db, config=MemoryConfig(bot_ids=list(serve.bot_ids)))  # as the server does


def deliver(
    mem: ConvMemory,
    worker: InboxWorker,
    ids: CallIds,
    deployment: Deployment,
    bodies: list[dict[str, Any]],
    order: list[int],
    sizes: list[int],
) -> list[tuple[Any, ...]]:
    """Deliver ``bodies[order]`` in batches of ``sizes`` (cycled); the worker runs after each."""
    inbox = worker.inbox
    memory_id = ids.memory_id(deployment)
    if deployment == "registered":
        inbox.register_task(ids.task, memory_id, human_id=ids.human, bot_id=BOT)
    pos, k = 0, 0
    while pos < len(order):
        size = sizes[k % len(sizes)]
        for i in order[pos : pos + size]:
            if "agora" in bodies[i]:
                doc = bodies[i]["agora"]
                if bodies[i]["kind"] == "103":  # the webhook: through the inbox and the worker
                    key = f"agora:notice:{doc['noticeId']}"
                    inbox.add(
                        "agora", key, json.dumps(doc, ensure_ascii=False), event=103, memory_id=memory_id
                    )
                elif isinstance(worker, TimelineWorker):  # GET history, pulled by the app
                    worker.store_inputs(memory_id, [(doc, "agora")])
                else:
                    mem.ingest(memory_id, doc, source="agora")
                continue
            if "im" in bodies[i]:
                # A pull (convmem pull im) runs the lifecycle itself, between the webhooks.
                if isinstance(worker, TimelineWorker):
                    worker.store_inputs(memory_id, [(bodies[i]["im"], "tencent_im")])
                else:
                    mem.ingest(memory_id, bodies[i]["im"], source="tencent_im")
                continue
            if "proxy" in bodies[i]:
                turn = json.dumps(bodies[i]["proxy"], ensure_ascii=False)
                inbox.add("proxy", f"proxy:{bodies[i]['request_id']}", turn, memory_id=memory_id)
                continue
            raw = json.dumps(bodies[i], ensure_ascii=False)
            fields = trtc_fields(bodies[i])
            key = delivery_key("trtc", bodies[i], raw.encode())
            inbox.add("trtc", key, raw, event=fields.event, task_id=fields.task_id, round_id=fields.round_id)
        for _ in range(50):  # bounded: each pass takes what is pending
            if worker.run_once() == 0:
                break
        pos, k = pos + size, k + 1
    assert inbox.pending() == []
    assert inbox.waiting(ids.task) == [], "a delivery was left waiting"
    stored = mem.store.recent_messages(memory_id, 1000)
    return sorted(
        (
            (m.role, m.content, m.original, m.interrupted, m.round_id, m.timestamp_ms, m.source)
            for m in stored
        ),
        key=lambda r: (r[5], r[0], r[1], r[4] or ""),
    )


def run_live(
    ids: CallIds, bodies: list[dict[str, Any]], order: list[int], sizes: list[int], deployment: Deployment
) -> list[tuple[Any, ...]]:
    """:func:`deliver` into a new database, through the whole lifecycle (the server's worker)."""
    with tempfile.TemporaryDirectory() as tmp:
        serve = _serve_settings(str(Path(tmp) / "live.db"), deployment)
        mem = _open(serve)
        try:
            return deliver(
                mem, InboxWorker(mem, Inbox(mem.store), serve), ids, deployment, bodies, order, sizes
            )
        finally:
            mem.close()


def _retried(bodies: list[dict[str, Any]], picks: list[int]) -> list[dict[str, Any]]:
    """The bodies plus vendor retries of some (same event, a later CallbackTs)."""
    out = list(bodies)
    webhooks = [b for b in bodies if "proxy" not in b and "im" not in b and "agora" not in b]
    for i in picks:
        retry = json.loads(json.dumps(webhooks[i % len(webhooks)]))
        retry["CallbackTs"] += 10_000
        out.append(retry)
    return out


def _draw_arrivals(rounds: list[Round], ids: CallIds, data: st.DataObject) -> tuple[Any, ...]:
    # Every LLM turn through the memory proxy (the README's recipe), or the voice channel alone;
    # through the proxy, TRTC sends the bot's sentences while the answer streams or only after.
    proxy = data.draw(st.booleans())
    late = proxy and data.draw(st.booleans())
    script = deliveries(rounds, ids, proxy=proxy, late=late)
    # Lines typed in IM around the call, also the same short words within seconds of a round.
    lines = st.tuples(st.integers(-5, 25), st.booleans(), st.sampled_from(HUMAN_SAYS + BOT_SAYS))
    script += im_pages(ids, data.draw(st.lists(lines, max_size=3, unique_by=lambda line: line[0])))
    if data.draw(st.integers(0, 2)) == 0:
        # The same person's earlier Agora call: history and 103 overlap almost completely; or
        # the 103 alone (the history was never pulled).
        hook = {**AGORA_103, "noticeId": f"{AGORA_103['noticeId']}-{ids.n}"}  # a notice per call
        script.append({"agora": hook, "kind": "103"})
        if data.draw(st.booleans()):
            script.append({"agora": AGORA_HISTORY, "kind": "history"})
        if data.draw(st.booleans()):
            # Its model turns through the memory proxy, the cut answer's stream included.
            script += agora_proxy_turns(ids)
    bodies = _retried(script, data.draw(st.lists(st.integers(0, 1000), max_size=3)))
    order = data.draw(st.permutations(range(len(bodies))))
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    return script, bodies, order, sizes


_DEPLOYMENTS = st.sampled_from(["bot_ids", "registered", "unknown"])
_SHARED: dict[str, tuple[ConvMemory, TimelineWorker]] = {}


@pytest.fixture(scope="module", autouse=True)
def _shared_databases() -> Iterator[None]:
    """One database per deployment for the many examples (each example's call has new ids)."""
    with tempfile.TemporaryDirectory() as tmp:
        for deployment in ("bot_ids", "registered", "unknown"):
            serve = _serve_settings(str(Path(tmp) / f"{deployment}.db"), deployment)
            mem = _open(serve)
            _SHARED[deployment] = (mem, TimelineWorker(mem, Inbox(mem.store), serve))
        try:
            yield
        finally:
            for mem, _worker in _SHARED.values():
                mem.close()
            _SHARED.clear()


def stored_as_it_happened(rounds: list[Round], deployment: Deployment, data: st.DataObject) -> None:
    """The property: one drawn call, delivered in the drawn order and batches, is stored as it happened."""
    ids = CallIds()
    script, bodies, order, sizes = _draw_arrivals(rounds, ids, data)
    mem, worker = _SHARED[deployment]
    got = deliver(mem, worker, ids, deployment, bodies, order, sizes)
    assert got == expected(rounds, script, ids)


# 40 drawn calls here; the integration tier draws 2,000 (tests/integration/test_trtc_live_any_order_full.py).
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=calls(), deployment=_DEPLOYMENTS, data=st.data())
def test_a_live_call_is_stored_as_it_happened_in_any_arrival_order(
    rounds: list[Round], deployment: Deployment, data: st.DataObject
) -> None:
    stored_as_it_happened(rounds, deployment, data)


def whole_lifecycle_stores_the_same_timeline(
    rounds: list[Round], deployment: Deployment, data: st.DataObject
) -> None:
    """The property through the whole lifecycle (a fresh store per call): the same timeline."""
    ids = CallIds()
    script, bodies, order, sizes = _draw_arrivals(rounds, ids, data)
    assert run_live(ids, bodies, order, sizes, deployment) == expected(rounds, script, ids)


# 10 drawn calls here; the integration tier draws 40 (tests/integration/test_trtc_live_any_order_full.py).
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=calls(), deployment=_DEPLOYMENTS, data=st.data())
def test_the_whole_lifecycle_stores_the_same_timeline(
    rounds: list[Round], deployment: Deployment, data: st.DataObject
) -> None:
    whole_lifecycle_stores_the_same_timeline(rounds, deployment, data)


def test_an_interruption_metric_alone_marks_the_round_already_stored() -> None:
    # The round's sentences and its 905 are stored first; the 908 comes alone, later.
    rounds = [Round("r-000", ["讲个故事吧。"], ["从前有座山，", "山里有座庙。"], 1, True, 908)]
    ids = CallIds()
    bodies = deliveries(rounds, ids)
    last = len(bodies) - 2  # the 908 (the 902 is last)
    order = [i for i in range(len(bodies)) if i != last] + [last]
    got = run_live(ids, bodies, order, [len(bodies) - 1, 1], "bot_ids")
    assert got == expected(rounds, bodies, ids)
    assert got[-1][2:4] == ("从前有座山，山里有座庙。", True)


def test_without_any_bot_id_the_bot_is_never_stored_as_the_user() -> None:
    # Bot sentences first, each alone, before the 905 and 904 that tell who is who.
    rounds = [Round("r-000", ["我到家了。"], ["欢迎回来！", "今天累吗？"], 2, True, None)]
    ids = CallIds()
    bodies = deliveries(rounds, ids)
    bot_first = sorted(
        range(len(bodies)), key=lambda i: bodies[i]["EventInfo"]["Payload"].get("UserId") != BOT
    )
    got = run_live(ids, bodies, bot_first, [1], "unknown")
    assert [(r[0], r[1]) for r in got] == [("user", "我到家了。"), ("assistant", "欢迎回来！今天累吗？")]


def _round_of(body: dict[str, Any]) -> str:
    """The round a body belongs to ("" for the 902 and copies of no round)."""
    if "proxy" in body:
        return str(body["request_id"]).split("-", 2)[2]  # req-<call>-<round>
    payload = body.get("EventInfo", {}).get("Payload", {})
    return str(payload.get("RoundId") or payload.get("Tag", {}).get("RoundId") or "")


def _in_every_way(rounds: list[Round], *, late: bool) -> list[list[tuple[Any, ...]]]:
    """Deliver the call through the proxy in hand-picked orders, one at a time and all at once.

    The orders a fallback by words could get wrong: the script's, reversed, the proxy's copies
    first or last, and the later rounds before the earlier ones. Each stored timeline must be
    the script's; they are returned for the caller's own checks.
    """
    arrangements: dict[str, Callable[[list[dict[str, Any]]], list[int]]] = {
        "script": lambda bodies: list(range(len(bodies))),
        "reversed": lambda bodies: list(range(len(bodies)))[::-1],
        "proxy first": lambda bodies: sorted(range(len(bodies)), key=lambda i: "proxy" not in bodies[i]),
        "proxy last": lambda bodies: sorted(range(len(bodies)), key=lambda i: "proxy" in bodies[i]),
        "later rounds first": lambda bodies: sorted(
            range(len(bodies)), key=lambda i: _round_of(bodies[i]), reverse=True
        ),
    }
    timelines = []
    for name, arrange in arrangements.items():
        for one_by_one in (True, False):
            ids = CallIds()
            bodies = deliveries(rounds, ids, proxy=True, late=late)
            mem, worker = _SHARED["bot_ids"]
            order = arrange(bodies)
            got = deliver(mem, worker, ids, "bot_ids", bodies, order, [1 if one_by_one else len(bodies)])
            assert got == expected(rounds, bodies, ids), (name, one_by_one)
            timelines.append(got)
    return timelines


def test_an_answer_whose_sentences_come_after_its_stream_closed_is_stored_once() -> None:
    # The same "好的。" in both rounds, each sentence sent after its stream closed: no span names a
    # round, the words name both, and each answer still goes to its own round (one message each).
    rounds = [
        Round("r-000", ["几点了？"], ["好的。"], 1, True, None),
        Round("r-001", ["嗯。"], ["好的。"], 1, False, None),
    ]
    for got in _in_every_way(rounds, late=True):
        assert [(r[0], r[1], r[4]) for r in got] == [
            ("user", "几点了？", "r-000"),
            ("assistant", "好的。", "r-000"),
            ("user", "嗯。", "r-001"),
            ("assistant", "好的。", "r-001"),
        ]


def test_an_answer_cut_at_a_barge_in_whose_sentence_comes_then_is_one_interrupted_message() -> None:
    # The answer's stream closed (whole, or hung up on) before TRTC sent the sentence it spoke;
    # the next round repeats the first words. One message each, the cut on the right round.
    for first in (
        Round("r-000", ["讲个故事吧。"], ["从前有座山，", "山里有座庙。"], 1, True, 906),
        Round("r-000", ["讲个故事吧。"], ["从前有座山，", "山里有座庙。"], 1, True, None, True, "还有，"),
    ):
        rounds = [first, Round("r-001", ["等一下。"], ["从前有座山，"], 1, False, None)]
        original = "从前有座山，山里有座庙。还有，" if first.hung_up else "从前有座山，山里有座庙。"
        for got in _in_every_way(rounds, late=True):
            bot = [r[1:5] for r in got if r[0] == "assistant"]
            assert bot == [("从前有座山，", original, True, "r-000"), ("从前有座山，", None, False, "r-001")]
            assert len(got) == 4


def test_repeated_words_answered_while_streaming_stay_on_their_own_rounds() -> None:
    # Span-matching times (the first choice): the second round's cut stays its own, whatever the
    # order, although its words start the first round's too.
    rounds = [
        Round("r-000", ["几点了？"], ["好的。"], 1, True, None),
        Round("r-001", ["嗯。"], ["好的。", "记得多喝水。"], 1, True, None, True, "还有，"),
    ]
    for got in _in_every_way(rounds, late=False):
        bot = [r[1:5] for r in got if r[0] == "assistant"]
        assert bot == [
            ("好的。", None, False, "r-000"),
            ("好的。", "好的。记得多喝水。还有，", True, "r-001"),
        ]
