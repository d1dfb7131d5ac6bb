"""Field precedence between two copies of one utterance (two reads that gave the same message id).

One rule, used where a batch is merged (``sources.timeline``) and where a stored row meets a
later copy (``store._messages``), so the result does not depend on which copy came first:

| field | taken from |
| --- | --- |
| text, ``source`` | the copy with a vendor turn id (``turn_id``); else the smaller ``(source, content)`` |
| ``turn_id`` | whichever copy has one |
| ``timestamp_ms`` | the earliest |
| ``interrupted`` | true when either copy knows the turn was cut off |
| ``original`` (the generated, unspoken text) | whichever copy has one |

Partial streamed messages and TRTC sentence lists are decided before this rule (their own
merges), so it only sees two complete copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from convmem_graph.models import Message
from convmem_graph.text.sentences import normalize_text

__all__ = [
    "IDENTITY_KEYS",
    "adds_to",
    "call_task",
    "copy_call",
    "has_identity",
    "is_proxy_copy",
    "merge_copies",
    "same_call_utterance",
    "two_utterances",
]

#: Metadata keys that carry a vendor's identity of an utterance (besides ``round_id``).
IDENTITY_KEYS = ("msg_key", "agent_id", "proxy_request_id")


def has_identity(round_id: str | None, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a message carries the identity its vendor gives it (a round, a message key ...)."""
    return round_id is not None or any((metadata or {}).get(k) for k in IDENTITY_KEYS)


def two_utterances(
    channel_a: str,
    identified_a: bool,
    channel_b: str,
    identified_b: bool,
    call_a: str | None = None,
    call_b: str | None = None,
) -> bool:
    """Whether two same-text messages with different ids are certainly two utterances.

    Two messages that both carry their vendor's identity and still got different ids are two
    things said: the proxy's "好的" twice, two IM messages, two TRTC rounds (also a welcome "好的"
    and a later round's "好的", whose sources differ), a line typed in IM and the same words said
    in a call. A proxy copy (channel ``api``) is the exception across channels: its request id
    names the request, not the utterance, which the voice channel also carries. Only the text
    window may take the others for one utterance: copies without such an identity, or a proxy
    copy and another channel's.

    A proxy copy of a voice call's turn (``call_a``/``call_b``: its TRTC task) stands only for
    that call's voice copy, never for an IM line or another call's words.

    Example:
        >>> two_utterances("voice", True, "im", True), two_utterances("voice", True, "api", True)
        (True, False)
        >>> two_utterances("api", True, "api", True), two_utterances("voice", True, "im", False)
        (True, False)
        >>> two_utterances("api", True, "im", False, call_a="t1")
        True
    """
    for channel, call, other_channel, other_call in (
        (channel_a, call_a, channel_b, call_b),
        (channel_b, call_b, channel_a, call_a),
    ):
        if (
            channel == "api"
            and call
            and other_channel != "api"
            and (other_channel, other_call) != ("voice", call)
        ):
            return True
    if not (identified_a and identified_b):
        return False
    return channel_a == channel_b or "api" not in (channel_a, channel_b)


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
    if first.original is None and second.original is not None:
        update["original"] = second.original
    return first.model_copy(update=update) if update else first


def adds_to(stored: Message, merged: Message) -> bool:
    """Whether ``merged`` (a stored row merged with a new copy) differs from ``stored``.

    Only the fields of the precedence rule count: a difference means the row must be replaced.
    """
    return (
        merged.content != stored.content
        or merged.source != stored.source
        or merged.turn_id != stored.turn_id
        or merged.timestamp_ms != stored.timestamp_ms
        or merged.interrupted != stored.interrupted
        or merged.original != stored.original
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

    The TRTC task when the copy names one (its voice copy, and the proxy's copy through
    ``X-Task-Id``); ``""`` (a call that cannot be named) for an Agora voice copy (``agent_id``)
    and a proxy copy without a task: Agora's request to a custom LLM names no agent, channel or
    call. ``None``: not a copy of a call's turn.

    Example:
        >>> copy_call("api", {"task_id": "t1"}), copy_call("voice", {"agent_id": "A4"})
        ('t1', '')
        >>> copy_call("im", {"msg_key": "k"}) is None
        True
    """
    task = call_task(metadata)
    if task is not None:
        return task
    meta = metadata or {}
    if (channel == "api" and meta.get("proxy_request_id")) or (channel == "voice" and meta.get("agent_id")):
        return ""
    return None


def is_proxy_copy(call: str, voice_texts: tuple[str | None, ...], proxy_text: str) -> bool:
    """Whether a proxy copy is a voice copy's utterance (both of ``call``, same speaker, within the window).

    The one identity rule between the proxy's copy of a call's turn and the call's voice copy,
    applied where a batch is stored (``store._messages``) whatever came first: in a named call
    (a TRTC task) one text starting the other (:func:`same_call_utterance`: a partial round, an
    answer cut short); in a call the request does not name (Agora) the same words only, as the
    text window would take them.

    Example:
        >>> is_proxy_copy("t1", ("好的。",), "好的。好的。"), is_proxy_copy("", ("好的。",), "好的。好的。")
        (True, False)
    """
    if call:
        return same_call_utterance(voice_texts, proxy_text)
    voice = normalize_text(voice_texts[0] or "") if voice_texts else ""
    return bool(voice) and voice == normalize_text(proxy_text)
