"""``convmem_graph._copies``: the one identity rule and the field precedence, in any order.

The timeline (one batch) and the store (a stored row and a later copy) both call these
functions, so their answers must not depend on which copy comes first: symmetry and
commutativity over drawn copies, and the cases the rule exists for (a cut proxy answer, the
same words in two rounds, an Agora call named by its channel).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from convmem_graph._copies import (
    CLOCK_SKEW_MS,
    CopyView,
    absorb_proxy_copy,
    copy_call,
    merge_copies,
    merged_generated,
    one_utterance,
    text_fallback_round,
)
from convmem_graph.models import Message

WINDOW = 10_000
TEXTS = ["好的。", "好的", "好的。记得多喝水。", "记得多喝水。", "Sounds great.", "sounds great"]


def _voice_round(text: str, ts: int, task: str = "t1", round_id: str = "r1") -> Message:
    return Message(
        id=f"v-{round_id}",
        role="assistant",
        content=text,
        channel="voice",
        source="llm",
        timestamp_ms=ts,
        round_id=round_id,
        metadata={"task_id": task, "sentences": [[ts, text]]},
    )


def _proxy_answer(text: str, sent: int, closed: int, *, cut: bool, **call: str) -> Message:
    meta: dict[str, Any] = {"proxy_request_id": f"q{sent}", "request_ms": sent, "answered_ms": closed, **call}
    return Message(
        id=f"p{sent}",
        role="assistant",
        content=text,
        channel="api",
        source="llm",
        timestamp_ms=sent + 300,
        interrupted=cut,
        metadata=meta,
    )


@st.composite
def copies(draw: st.DrawFn) -> Message:
    channel = draw(st.sampled_from(["voice", "api", "im"]))
    ts = draw(st.integers(0, 30_000))
    meta: dict[str, Any] = {}
    if channel == "api":
        meta["proxy_request_id"] = f"q{draw(st.integers(0, 3))}"
        if draw(st.booleans()):
            meta |= {"request_ms": ts - 300, "answered_ms": ts + draw(st.integers(0, 4_000))}
    if channel != "im" and draw(st.booleans()):
        meta["task_id"] = draw(st.sampled_from(["t1", "t2"]))
    if channel == "voice" and draw(st.booleans()):
        meta["sentences"] = [[ts, "x"], [ts + draw(st.integers(0, 3_000)), "y"]]
    if channel == "im" and draw(st.booleans()):
        meta["msg_key"] = "k"
    return Message(
        id=f"m{draw(st.integers(0, 10**6))}",
        role=draw(st.sampled_from(["user", "assistant"])),
        content=draw(st.sampled_from(TEXTS)),
        channel=channel,
        source="llm",
        timestamp_ms=ts,
        interrupted=draw(st.booleans()),
        round_id=draw(st.sampled_from([None, "r1"])) if channel == "voice" else None,
        metadata=meta,
    )


@given(copies(), copies())
def test_the_identity_rule_is_symmetric(a: Message, b: Message) -> None:
    va, vb = CopyView.of_message(a), CopyView.of_message(b)
    assert one_utterance(va, vb, WINDOW) == one_utterance(vb, va, WINDOW)


@given(st.sampled_from([*TEXTS, None]), st.sampled_from([*TEXTS, None]))
def test_the_generated_text_of_two_copies_does_not_depend_on_their_order(
    a: str | None, b: str | None
) -> None:
    one, two = {"generated": a}, {"generated": b}
    assert merged_generated(one, two) == merged_generated(two, one)


@given(st.sampled_from(TEXTS), st.sampled_from(TEXTS), st.sampled_from([*TEXTS, None]), st.booleans())
def test_merging_two_copies_is_symmetric(text: str, other: str, generated: str | None, cut: bool) -> None:
    hook = Message(
        id="x",
        role="assistant",
        content=text,
        channel="voice",
        source="llm",
        timestamp_ms=20,
        interrupted=cut,
        metadata={"agent_id": "A", "rtc_channel": "c1"},
    )
    history = hook.model_copy(
        update={"content": other, "timestamp_ms": 10, "turn_id": 2, "metadata": {"agent_id": "A"}}
    )
    if generated:
        history.metadata["generated"] = generated
    merged = merge_copies(hook, history)
    assert merged == merge_copies(history, hook)
    # The history copy (a turn id) gives the words; the 103's channel still names the call.
    assert merged.content == other and merged.metadata["rtc_channel"] == "c1"


def test_a_cut_answer_is_the_round_its_request_was_open_for_not_another_with_the_same_words() -> None:
    first = _voice_round("好的。", 1_000, round_id="r1")
    second = _voice_round("好的。", 6_000, round_id="r2")
    cut = _proxy_answer("好的。记得多", 5_500, 7_000, cut=True, task_id="t1")
    view = CopyView.of_message(cut)
    assert not one_utterance(view, CopyView.of_message(first), WINDOW)
    assert one_utterance(view, CopyView.of_message(second), WINDOW)
    absorbed = absorb_proxy_copy(second, cut)
    assert (absorbed.content, absorbed.interrupted, absorbed.original) == ("好的。", True, "好的。记得多")
    assert absorb_proxy_copy(absorbed, cut) == absorbed  # a retry of the copy changes nothing
    # The other round stays as it was, whatever the words.
    assert absorb_proxy_copy(first, cut) is first


def test_the_request_span_allows_only_clock_skew() -> None:
    round_at = _voice_round("好的。", 10_000)
    near = _proxy_answer("好的。", 10_000 + CLOCK_SKEW_MS, 12_000, cut=True, task_id="t1")
    far = _proxy_answer("好的。", 10_001 + CLOCK_SKEW_MS, 12_000, cut=True, task_id="t1")
    assert one_utterance(CopyView.of_message(near), CopyView.of_message(round_at), WINDOW)
    assert not one_utterance(CopyView.of_message(far), CopyView.of_message(round_at), WINDOW)


def test_an_agora_proxy_copy_is_linked_by_its_channel_only() -> None:
    spoken = Message(
        id="ag",
        role="assistant",
        content="好的，我记住了",
        channel="voice",
        source="llm",
        timestamp_ms=5_000,
        metadata={"agent_id": "A", "rtc_channel": "c1"},
    )
    cut = _proxy_answer("好的，我记住了，以后会避开芒果。", 4_000, 8_000, cut=True, rtc_channel="c1")
    other_call = _proxy_answer("好的，我记住了，以后会避开芒果。", 4_000, 8_000, cut=True, rtc_channel="c2")
    assert copy_call("api", cut.metadata) == copy_call("voice", spoken.metadata) == "agora:c1"
    assert one_utterance(CopyView.of_message(cut), CopyView.of_message(spoken), WINDOW)
    assert not one_utterance(CopyView.of_message(other_call), CopyView.of_message(spoken), WINDOW)
    linked = absorb_proxy_copy(spoken, cut)
    assert (linked.content, linked.interrupted, linked.original) == (
        "好的，我记住了",
        True,
        "好的，我记住了，以后会避开芒果。",
    )


def _late_call(rounds: int, text: str = "好的。") -> tuple[dict[str, CopyView], list[Message]]:
    """A TRTC call whose bot sentences all come after their answer's stream closed.

    Round ``k``: the human speaks at ``10_000 k``, the request goes out 1 s later and its stream
    closes 300 ms after that, the bot's sentence comes 2 s after the request (past span + skew).
    Returns the call's voice copies (human and bot per round) and the proxy's answers.
    """
    copies: dict[str, CopyView] = {}
    answers = []
    for k in range(rounds):
        human, sent = 10_000 * k, 10_000 * k + 1_000
        for role, ts, said in (("user", human, "嗯。"), ("assistant", sent + 2_000, text)):
            meta = {"task_id": "t1", "sentences": [[ts, said]]}
            copies[f"{role}-{k}"] = CopyView.of(role, "voice", said, None, ts, f"r{k}", meta)
        answers.append(_proxy_answer(text, sent, sent + 300, cut=False, task_id="t1"))
    return copies, answers


def test_an_answer_no_span_names_goes_to_its_own_round_by_its_words() -> None:
    copies, answers = _late_call(3)
    for k, answer in enumerate(answers):
        view = CopyView.of_message(answer)
        # No round has a sentence in the request's span: only the words can link them.
        assert not any(one_utterance(view, v, WINDOW) for v in copies.values())
        assert text_fallback_round(view, copies, WINDOW) == f"assistant-{k}"
        # A round another answer's span names is none.
        assert text_fallback_round(view, copies, WINDOW, {f"assistant-{k}"}) is None


def test_the_fallback_needs_the_same_words_the_round_s_human_turn_and_the_window() -> None:
    copies, answers = _late_call(2)
    view = CopyView.of_message(answers[0])
    other = CopyView.of_message(answers[0].model_copy(update={"content": "不好。"}))
    assert text_fallback_round(other, copies, WINDOW) is None
    # Until round 0's human turn is known, the later round (same words) is never taken instead.
    without_human = {key: v for key, v in copies.items() if key != "user-0"}
    assert text_fallback_round(view, without_human, WINDOW) is None
    assert text_fallback_round(view, copies, 1_000) is None  # the round is 1.7 s from the answer
    # An Agora answer (no task) and a user turn are not answers of a TRTC round.
    agora = CopyView.of_message(_proxy_answer("好的。", 1_000, 1_300, cut=False, rtc_channel="c1"))
    assert text_fallback_round(agora, copies, WINDOW) is None


@given(st.integers(1, 4), st.data())
def test_the_fallback_round_depends_on_no_arrival_order(rounds: int, data: st.DataObject) -> None:
    # Any subset of the call's copies known, in any order: an answer goes to its own round when
    # that round and its human turn are known, else to none (never to another "好的。").
    copies, answers = _late_call(rounds)
    keys = data.draw(st.permutations(sorted(copies)))
    known = {key: copies[key] for key in keys[: data.draw(st.integers(0, len(keys)))]}
    for k, answer in enumerate(answers):
        got = text_fallback_round(CopyView.of_message(answer), known, WINDOW)
        own = f"assistant-{k}" in known and f"user-{k}" in known
        assert got == (f"assistant-{k}" if own else None)


def test_a_linked_answer_hands_its_cut_to_the_round_without_a_span() -> None:
    spoken = _voice_round("好的。", 9_000)
    cut = _proxy_answer("好的。记得多", 5_500, 5_800, cut=True, task_id="t1")
    assert absorb_proxy_copy(spoken, cut) is spoken  # the span alone does not name this round
    linked = absorb_proxy_copy(spoken, cut, linked=True)
    assert (linked.content, linked.interrupted, linked.original) == ("好的。", True, "好的。记得多")
