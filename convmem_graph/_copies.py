"""When two copies are one utterance, and what the one message takes from each.

One module answers both questions wherever copies meet: where a batch is merged
(``sources.timeline``) and where the store meets a stored row with a later copy
(``store._messages``), so the result does not depend on which copy came first or in which run.

:func:`one_utterance` is the identity rule (two copies with different ids): the same words
within the window in two channels unless both carry their vendor's identity; a proxy copy of a
named call (TRTC ``X-Task-Id``) only with that call's voice copy of the same speaker, one text
starting the other; a proxy answer that knows when its request was open with the bot round of
its call that has a sentence in that span (:func:`answers_round`), which tells repeated words
("好的" in two rounds) apart, else with the round :func:`text_fallback_round` names (TRTC may
send a bot sentence only once it was spoken, after the stream closed).

Field precedence between two copies of one utterance:

| field | taken from |
| --- | --- |
| text, ``source`` | the copy with a vendor turn id (``turn_id``); else the smaller |
|  | ``(source, content)``; the voice copy over a proxy copy it absorbs |
| ``turn_id`` | whichever copy has one |
| ``timestamp_ms`` | the earliest |
| ``interrupted`` | true when any copy knows the turn was cut off (a hung-up proxy answer too) |
| ``original`` | the generated texts known (a copy's ``original``, a TRTC round's sentences, |
|  | the proxy's stream): the longest the others start, the voice copy's when they |
|  | disagree; none when it is the spoken text |

Partial streamed messages and TRTC sentence lists are decided before this rule (their own
merges), so it only sees two complete copies.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from convmem_graph.models import Message
from convmem_graph.text.sentences import join_sentences, normalize_text

__all__ = [
    "CLOCK_SKEW_MS",
    "IDENTITY_KEYS",
    "CopyView",
    "absorb_proxy_copy",
    "adds_to",
    "answers_round",
    "call_task",
    "copy_call",
    "generated_text",
    "has_identity",
    "merge_copies",
    "merged_generated",
    "one_utterance",
    "original_of",
    "same_call_utterance",
    "text_fallback_round",
]

#: Metadata keys that carry a vendor's identity of an utterance (besides ``round_id``).
IDENTITY_KEYS = ("msg_key", "agent_id", "proxy_request_id")

#: How far the proxy's clock and a vendor's event times may disagree (ms). Only clock skew:
#: the rounds before and after a request are apart by a human turn and a model's latency.
CLOCK_SKEW_MS = 500


def has_identity(round_id: str | None, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a message carries the identity its vendor gives it (a round, a message key ...)."""
    return round_id is not None or any((metadata or {}).get(k) for k in IDENTITY_KEYS)


def _primary(a: Message, b: Message) -> tuple[Message, Message]:
    if (a.turn_id is None) != (b.turn_id is None):
        return (a, b) if a.turn_id is not None else (b, a)
    return (a, b) if (a.source, a.content) <= (b.source, b.content) else (b, a)


def merge_copies(a: Message, b: Message) -> Message:
    """Return the one message two copies of an utterance make (symmetric in ``a`` and ``b``).

    Example:
        >>> kw = {"id": "x", "role": "user", "content": "hi", "channel": "voice", "source": "asr"}
        >>> voice = Message(**kw, timestamp_ms=20, turn_id=3)
        >>> hook = Message(**kw, timestamp_ms=10)
        >>> m = merge_copies(hook, voice)
        >>> (m.turn_id, m.timestamp_ms) == (3, 10) and m == merge_copies(voice, hook)
        True
    """
    first, second = _primary(a, b)
    update: dict[str, object] = {}
    if second.timestamp_ms < first.timestamp_ms:
        update["timestamp_ms"] = second.timestamp_ms
    if second.interrupted and not first.interrupted:
        update["interrupted"] = True
    generated = merged_generated(first.metadata, second.metadata)
    original = generated_text(first.original, second.original, generated)
    if original != first.original:
        update["original"] = original
    # What names the call (a 103 item's channel, a proxy answer's stream) survives the merge, so
    # a copy of the call arriving later still finds this one (GET history names no channel).
    learned = {k: second.metadata[k] for k in _CALL_KEYS if k in second.metadata and k not in first.metadata}
    if generated and generated != first.metadata.get("generated"):
        learned["generated"] = generated
    if learned:
        update["metadata"] = {**first.metadata, **learned}
    return first.model_copy(update=update) if update else first


#: Metadata a merged copy keeps from either copy: what names its call, the proxy's stream.
_CALL_KEYS = ("task_id", "agent_id", "rtc_channel")


def adds_to(stored: Message, merged: Message) -> bool:
    """Whether ``merged`` (a stored row merged with a new copy) differs from ``stored``.

    Only the fields of the precedence rule count (and what names the copy's call, the proxy's
    stream): a difference means the row must be replaced.
    """
    return (
        merged.content != stored.content
        or merged.source != stored.source
        or merged.turn_id != stored.turn_id
        or merged.timestamp_ms != stored.timestamp_ms
        or merged.interrupted != stored.interrupted
        or merged.original != stored.original
        or any(merged.metadata.get(k) != stored.metadata.get(k) for k in (*_CALL_KEYS, "generated"))
    )


def call_task(metadata: Mapping[str, Any] | None) -> str | None:
    """The voice call (TRTC ``TaskId``) a message belongs to: its voice copy and its proxy copy say so."""
    task = (metadata or {}).get("task_id")
    return task if isinstance(task, str) and task else None


def same_call_utterance(voice_texts: tuple[str | None, ...], proxy_text: str) -> bool:
    """Whether a proxy copy's text is what a voice round of the same call and speaker says.

    The voice copy may hold only the round's first sentences (903s arrive one at a time) or only
    what was spoken before an interruption (905), so one text being the start of the other counts,
    after the timeline's normalization (width, case, punctuation, spaces).

    Example:
        >>> same_call_utterance(("哇，八公里！", None), "哇，八公里！六分半的配速很稳呀。")
        True
        >>> same_call_utterance(("好的。", None), "不好。")
        False
    """
    proxy = normalize_text(proxy_text)
    if not proxy:
        return False
    for text in voice_texts:
        voice = normalize_text(text or "")
        if voice and (proxy.startswith(voice) or voice.startswith(proxy)):
            return True
    return False


def copy_call(channel: str, metadata: Mapping[str, Any] | None) -> str | None:
    """Which voice call a voice or proxy copy belongs to, as far as the copy tells.

    - The TRTC task when the copy names one (its voice copy, and the proxy's copy through
      ``X-Task-Id``).
    - ``agora:<channel>`` for an Agora copy that names its RTC channel: a 103 item (its
      ``payload.channel``) and the proxy's copy of a request whose join put the channel in
      ``llm.params`` (``convmem_call``, which Agora merges into every custom-LLM request body).
    - ``""`` (a call that cannot be named) for another Agora copy (``agent_id``: ``GET history``
      carries no channel) and a proxy copy without either.
    - ``None``: not a copy of a call's turn.

    Example:
        >>> copy_call("api", {"task_id": "t1"}), copy_call("voice", {"agent_id": "A4"})
        ('t1', '')
        >>> copy_call("api", {"proxy_request_id": "q", "rtc_channel": "c1"})
        'agora:c1'
        >>> copy_call("im", {"msg_key": "k"}) is None
        True
    """
    task = call_task(metadata)
    if task is not None:
        return task
    meta = metadata or {}
    agora = meta.get("agent_id") if channel != "api" else meta.get("proxy_request_id")
    if not agora:
        return None
    rtc_channel = meta.get("rtc_channel")
    return f"agora:{rtc_channel}" if isinstance(rtc_channel, str) and rtc_channel else ""


def answers_round(request: tuple[int, int], times: tuple[int, ...]) -> bool:
    """Whether a bot round with sentences at ``times`` is, by time alone, the one a proxy request answered.

    ``request`` is ``(sent, closed)`` on the proxy's clock: the request went out after the
    human's turn and stayed open while the answer streamed. A bot 903 is "the completed LLM
    text" of the round (spec 3.6); when TRTC sends it as the model's sentences complete, the
    answering round has a sentence in that span, the round before ended before the human spoke
    again and the one after starts after the next human turn. ``CLOCK_SKEW_MS`` either side
    covers the two clocks. This is the first choice, and it tells "好的" in two rounds apart.

    When TRTC sends a bot 903 is not documented (unverified on a live account): if it is sent as
    the sentence is spoken, after the round, or at a barge-in, every sentence may come after the
    stream closed and no round matches. The store then links the answer by its words
    (:func:`text_fallback_round`), so it is not stored beside its round.

    Example:
        >>> answers_round((1_000, 3_000), (2_400, 3_200)), answers_round((1_000, 3_000), (6_000,))
        (True, False)
    """
    sent, closed = request
    return any(sent - CLOCK_SKEW_MS <= t <= closed + CLOCK_SKEW_MS for t in times)


def text_fallback_round(
    proxy: CopyView, copies: Mapping[str, CopyView], window_ms: int, taken: Collection[str] = ()
) -> str | None:
    """The bot round a proxy answer of a TRTC call is, when no round of the call has a sentence in its span.

    ``copies`` are the call's copies known (keyed by id: the batch and the stored rows near it);
    ``taken`` are rounds another proxy answer's span already names (their answer is known, so
    they are no fallback). The answer is the EARLIEST bot round (first sentence time, then round
    id, then key: a fixed order) of the same call that

    - has its first sentence at or after the request was sent (minus ``CLOCK_SKEW_MS``): the
      rounds before were answers to earlier requests;
    - has its human turn known and begun by the time the request was sent (plus the skew):
      TRTC sends the request after the human's ASR sentences, which it carries, so a LATER round
      (whose human spoke after this answer) is never taken, whichever copies arrived first;
    - says what the answer says (one text starting the other: :func:`same_call_utterance`, a
      round cut at a barge-in included) within ``window_ms``.

    With all copies known only the round that answered fits the two time bounds, so the choice
    does not depend on arrival order. Until the round's human turn is stored the answer is left
    alone (stored beside the round) and is linked when the last of them arrives: linking it to a
    later round with the same words could not be undone (the proxy copy is then deleted).

    Example:
        >>> def view(role, text, ts, rnd, meta):
        ...     return CopyView.of(role, "voice", text, None, ts, rnd, {"task_id": "t1", **meta})
        >>> copies = {
        ...     "h1": view("user", "几点了", 1_000, "r1", {"sentences": [[1_000, "几点了"]]}),
        ...     "b1": view("assistant", "好的。", 4_000, "r1", {"sentences": [[4_000, "好的。"]]}),
        ...     "h2": view("user", "嗯", 6_000, "r2", {"sentences": [[6_000, "嗯"]]}),
        ...     "b2": view("assistant", "好的。", 9_000, "r2", {"sentences": [[9_000, "好的。"]]}),
        ... }
        >>> meta = {"task_id": "t1", "proxy_request_id": "q", "request_ms": 1_500, "answered_ms": 2_000}
        >>> answer = CopyView.of("assistant", "api", "好的。", None, 1_600, None, meta)
        >>> text_fallback_round(answer, copies, 10_000), text_fallback_round(answer, copies, 10_000, {"b1"})
        ('b1', None)
    """
    if proxy.request is None or proxy.channel != "api" or proxy.task is None:
        return None
    sent = proxy.request[0]
    # When each round's human turn began (its first sentence), for the rounds of this call.
    asked: dict[str, int] = {}
    for view in copies.values():
        if view.role == "user" and view.channel == "voice" and view.task == proxy.task and view.round_id:
            begun = min(view.round_times or (view.timestamp_ms,))
            asked[view.round_id] = min(begun, asked.get(view.round_id, begun))
    best: tuple[int, str, str] | None = None
    for key, view in copies.items():
        if (
            key in taken
            or view.role != "assistant"
            or view.channel != "voice"
            or view.task != proxy.task
            or view.round_id is None
            or not view.round_times
            or abs(view.timestamp_ms - proxy.timestamp_ms) > window_ms
        ):
            continue
        first = min(view.round_times)
        human = asked.get(view.round_id)
        if first < sent - CLOCK_SKEW_MS or human is None or human > sent + CLOCK_SKEW_MS:
            continue
        if not same_call_utterance((view.content, view.original), proxy.content):
            continue
        candidate = (first, view.round_id, key)
        if best is None or candidate < best:
            best = candidate
    return best[2] if best is not None else None


def _request_span(channel: str, role: str, metadata: Mapping[str, Any]) -> tuple[int, int] | None:
    # The proxy keeps when it sent an answer's request and when the stream closed (server/proxy.py).
    if channel != "api" or role != "assistant":
        return None
    sent, closed = metadata.get("request_ms"), metadata.get("answered_ms")
    if isinstance(sent, int) and isinstance(closed, int) and not isinstance(sent, bool):
        return (sent, max(sent, closed))
    return None


def _sentence_times(metadata: Mapping[str, Any]) -> tuple[int, ...]:
    raw = metadata.get("sentences")
    if not isinstance(raw, list):
        return ()
    return tuple(
        item[0]
        for item in raw
        if isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], int)
    )


@dataclass(frozen=True, slots=True)
class CopyView:
    """What the identity rule reads of one copy (a message in a batch or a stored row)."""

    role: str
    channel: str
    content: str
    original: str | None
    timestamp_ms: int
    #: Carries its vendor's identity (:func:`has_identity`).
    identified: bool
    #: The call a voice or proxy copy belongs to (:func:`copy_call`).
    call: str | None
    #: The TRTC task named by the copy (:func:`call_task`).
    task: str | None
    #: A TRTC round's sentence times and its own time (none for other copies).
    round_times: tuple[int, ...]
    #: Known to be cut off.
    interrupted: bool
    #: A proxy answer's request span (``request_ms``, ``answered_ms``), else ``None``.
    request: tuple[int, int] | None
    #: The vendor's round (TRTC ``RoundId``): a round's human and bot copies share it.
    round_id: str | None = None

    @classmethod
    def of(
        cls,
        role: str,
        channel: str,
        content: str,
        original: str | None,
        timestamp_ms: int,
        round_id: str | None,
        metadata: Mapping[str, Any] | None,
        interrupted: bool = False,
    ) -> CopyView:
        """The view of a copy from its fields (a stored row's columns, a message's attributes)."""
        meta = metadata or {}
        is_round = isinstance(meta.get("sentences"), list)  # a TRTC round (sources/trtc.py)
        return cls(
            role=role,
            channel=channel,
            content=content,
            original=original,
            timestamp_ms=timestamp_ms,
            identified=has_identity(round_id, meta),
            call=copy_call(channel, meta),
            task=call_task(meta),
            round_times=(*_sentence_times(meta), timestamp_ms) if is_round else (),
            interrupted=interrupted,
            request=_request_span(channel, role, meta),
            round_id=round_id,
        )

    @classmethod
    def of_message(cls, m: Message) -> CopyView:
        """The view of a message."""
        return cls.of(
            m.role, m.channel, m.content, m.original, m.timestamp_ms, m.round_id, m.metadata, m.interrupted
        )


def one_utterance(a: CopyView, b: CopyView, window_ms: int) -> bool:
    """Whether two copies with different ids are one utterance (the one identity rule).

    - Different speakers, or further apart than ``window_ms``: two.
    - A proxy copy (channel ``api``) of a named call (a TRTC task) and another channel's copy:
      one only when that is the call's voice copy of the same speaker and, for an answer that
      knows its request's span, a round spoken while it was open (:func:`answers_round`), else
      one text starting the other (:func:`same_call_utterance`: a partial round, an answer cut
      short). Never an IM line or another call's words. (An answer no round matches by span is
      linked by its words by the store, which sees the call's other copies:
      :func:`text_fallback_round`; a pair alone cannot tell which round that is.)
    - Otherwise the same normalized words, except two copies that both carry their vendor's
      identity in one channel or in two channels neither of which is the proxy: the proxy's
      "好的" twice, two IM messages, two TRTC rounds, a line typed in IM and the same words
      said in a call are two. A proxy copy's request id names the request, not the utterance,
      so a proxy copy without a named call (Agora) and a voice copy with the same words are one.

    Example:
        >>> def view(channel, text, ts=0, meta=None, rnd=None, role="assistant"):
        ...     return CopyView.of(role, channel, text, None, ts, rnd, meta)
        >>> voice = view("voice", "好的。", 2_000, {"task_id": "t1", "sentences": [[2_000, "好的。"]]}, "r1")
        >>> cut = {"task_id": "t1", "proxy_request_id": "q", "request_ms": 900, "answered_ms": 2_100}
        >>> one_utterance(view("api", "好的。还有", 1_200, cut), voice, 10_000)
        True
        >>> later = {**cut, "request_ms": 5_000, "answered_ms": 6_000}
        >>> one_utterance(view("api", "好的。", 5_200, later), voice, 10_000)
        False
        >>> one_utterance(view("im", "好的", 0, {"msg_key": "k"}), voice, 10_000)
        False
    """
    if a.role != b.role or abs(a.timestamp_ms - b.timestamp_ms) > window_ms:
        return False
    for proxy, other in ((a, b), (b, a)):
        if proxy.channel == "api" and other.channel != "api" and proxy.call:
            if other.call != proxy.call:
                return False
            text = same_call_utterance((other.content, other.original), proxy.content)
            if proxy.request is None or other.role != "assistant":
                return text
            if other.round_times:
                # A TRTC round: its sentences tell which request it answered, whatever the words.
                return answers_round(proxy.request, other.round_times)
            # An Agora answer (its time is when its speech began): one spoken while the request
            # was open, for a stream cut short (an answer streamed whole may be spoken later).
            return text and (not proxy.interrupted or answers_round(proxy.request, (other.timestamp_ms,)))
    if normalize_text(a.content) != normalize_text(b.content) or not normalize_text(a.content):
        return False
    both_identified = a.identified and b.identified
    return not (both_identified and (a.channel == b.channel or "api" not in (a.channel, b.channel)))


def generated_text(*texts: str | None) -> str | None:
    """The generated text several copies know: the first, replaced by any later one that extends it.

    Texts are given voice copy first; a later text that does not start with the current one
    (after normalization) is ignored, so a proxy's stream never overrides what the call said.

    Example:
        >>> generated_text("好的。", None, "好的。记得多喝水。")
        '好的。记得多喝水。'
        >>> generated_text("好的。", "不好")
        '好的。'
    """
    best: str | None = None
    for text in texts:
        if not text:
            continue
        if best is None:
            best = text
            continue
        norm, current = normalize_text(text), normalize_text(best)
        if len(norm) > len(current) and norm.startswith(current):
            best = text
    return best


def original_of(content: str, *generated: str | None) -> str | None:
    """``original`` of a cut turn: the generated text (:func:`generated_text`) unless it was all said.

    Example:
        >>> original_of("好的。", "好的。记得多喝水。"), original_of("好的。", "好的。")
        ('好的。记得多喝水。', None)
    """
    text = generated_text(*generated)
    return text if text and text != content else None


def merged_generated(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The proxy's generated text two copies' metadata keep (``generated``), combined in any order.

    Longer wins when one extends the other; else the smaller text (a fixed choice).
    """
    texts = sorted({t for t in (a.get("generated"), b.get("generated")) if isinstance(t, str) and t})
    if len(texts) < 2:
        return texts[0] if texts else None
    x, y = texts
    nx, ny = normalize_text(x), normalize_text(y)
    if len(ny) > len(nx) and ny.startswith(nx):
        return y
    if len(nx) > len(ny) and nx.startswith(ny):
        return x
    return x


def absorb_proxy_copy(voice: Message, proxy: Message, *, linked: bool = False) -> Message:
    """The voice copy after taking in what a proxy copy of the same answer knows.

    A proxy answer whose client hung up (``interrupted``) and whose request span names this
    round (:func:`answers_round`), or that the caller ``linked`` to it by
    :func:`text_fallback_round`, marks the round interrupted and keeps its streamed text as
    ``metadata.generated``; ``original`` is then the generated text (:func:`original_of`: the
    round's own sentences first, the stream when it extends them). The spoken text stays the
    voice copy's. Anything else leaves the voice copy as it is: a proxy answer that does not
    know its request's span could be another round's with the same words.

    Example:
        >>> voice = Message(id="v", role="assistant", content="好的。", channel="voice", source="llm",
        ...                 timestamp_ms=2_000, round_id="r1",
        ...                 metadata={"task_id": "t1", "sentences": [[2_000, "好的。"]]})
        >>> cut = Message(id="p", role="assistant", content="好的。记得", channel="api", source="llm",
        ...               timestamp_ms=1_200, interrupted=True,
        ...               metadata={"task_id": "t1", "request_ms": 900, "answered_ms": 2_100})
        >>> m = absorb_proxy_copy(voice, cut)
        >>> (m.content, m.interrupted, m.original)
        ('好的。', True, '好的。记得')
    """
    request = _request_span(proxy.channel, proxy.role, proxy.metadata)
    if (
        not proxy.interrupted
        or voice.role != "assistant"
        or request is None
        or not (linked or answers_round(request, (*_sentence_times(voice.metadata), voice.timestamp_ms)))
    ):
        return voice
    generated = merged_generated(voice.metadata, {"generated": proxy.original or proxy.content})
    metadata = {**voice.metadata, "generated": generated}
    joined = _joined(voice.metadata)
    original = original_of(voice.content, joined, voice.original, generated)
    return voice.model_copy(update={"interrupted": True, "original": original, "metadata": metadata})


def _joined(metadata: Mapping[str, Any]) -> str | None:
    raw = metadata.get("sentences")
    if not isinstance(raw, list):
        return None
    pairs = [item for item in raw if isinstance(item, list | tuple) and len(item) == 2]
    return join_sentences([text for _ts, text in pairs if isinstance(text, str)]) or None
