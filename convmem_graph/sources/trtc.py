"""Tencent TRTC AI-conversation server callbacks (``EventGroupId`` 9).

Accepted shapes: one callback body, a list of bodies, a list of deliveries ``{headers, raw_body}``
(``raw_body`` is the exact JSON text), raw JSON strings, and our fixture's wrapper
``{deliveries: [...], bot_user_id, target_user_id}``; lists may mix these.

Rules decided here:

- Event 903 sentences are joined into one turn per (``TaskId``, ``RoundId``, ``UserId``) in
  ``EventMsTs`` order (arrival order on ties) whatever the delivery order. Chinese sentences join
  without a separator; a space is inserted only between two Latin-script ends.
- Assistant = a ``UserId`` in the bot ids, the wrapper's ``bot_user_id``, or the ``UserId`` of any
  905 event ("bot finished speaking"). When no bot is known but the human (``target_user_id``, or
  the ``UserId`` of a 904 "speech started", which ASR sends for the human only) is, every other
  speaker is the assistant. When neither is known a turn is skipped as ``speaker_unknown``, never
  guessed to be the user's.
- The bot's turn text is the 905 ``Text`` of its round when present (what was spoken), else the
  joined 903 sentences. A round named by an ``interruption`` metric (906/908) is ``interrupted``;
  when the 905 text differs from the generated sentences, those are kept in ``original``.
  Every interrupted round is also listed in ``ReadResult.interruptions``: the store marks the
  round's bot turn whether it was stored before or comes later (a metric delivered alone).
- A bot turn that comes before the human's first speech (903 or 904) in the same payload is the
  welcome message (``source`` ``greeting``); other bot turns are ``llm`` (also a bot turn read
  alone, without the human's events), human turns ``asr``; channel ``voice``. The store decides
  the label again on what it holds (``store._rounds``), so a welcome read alone ends as ``greeting``.
- Exact duplicate deliveries (same body, or same TaskId/EventType/EventMsTs/RoundId/UserId/Text)
  are skipped as ``duplicate_delivery``; every other event type is skipped as
  ``event_type_ignored`` with its name.
- Time: the first sentence's ``EventMsTs`` (else ``CallbackMsTs``/``CallbackTs``).
  ``StartTimeMs``/``EndTimeMs`` look like offsets from the task start and are only kept as metadata.
- Id: (``TaskId``, ``RoundId``, ``UserId``); metadata ``sentences`` keeps ``[EventMsTs, text]``
  pairs so :func:`convmem_graph.sources.merge_timeline` can rejoin a turn whose sentences were read
  from separate payloads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from convmem_graph._ids import stable_id
from convmem_graph.errors import SourceFormatError
from convmem_graph.models import Message, ReadResult
from convmem_graph.sources._common import (
    MAX_TEXT_CHARS,
    ReadContext,
    clean_text,
    fail,
    get_dict,
    get_list,
    idx,
    join,
    opt_int,
    opt_str,
    parse_json_text,
    timestamp_ms,
)
from convmem_graph.text.sentences import join_sentences

__all__ = ["EVENT_NAMES", "join_sentences", "looks_like_trtc", "read_trtc"]

SOURCE = "trtc"
EVENT_NAMES = {
    901: "EVENT_TYPE_AI_SERVICE_START",
    902: "EVENT_TYPE_AI_SERVICE_STOP",
    903: "EVENT_TYPE_AI_SERVICE_MSG",
    904: "EVENT_TYPE_AI_START_OF_SPEECH",
    905: "EVENT_TYPE_AI_SPEAKING_FINISHED",
    906: "EVENT_TYPE_AI_METRIC_MESSAGE",
    908: "EVENT_TYPE_AI_ERROR_METRIC_CALLBACK",
    909: "EVENT_TYPE_AI_SESSION_STATUS_CALLBACK",
}
_AI_GROUP = 9


def looks_like_trtc(data: Any) -> bool:
    """Return whether ``data`` looks like TRTC AI callbacks (one, several, or a deliveries wrapper)."""
    if isinstance(data, Mapping):
        return "deliveries" in data or "EventGroupId" in data or "EventInfo" in data or "raw_body" in data
    if isinstance(data, list) and data:
        return all(_looks_like_entry(d) for d in data[:50])
    return False


def _looks_like_entry(entry: Any) -> bool:
    if isinstance(entry, str | bytes):
        return '"EventGroupId"' in (entry if isinstance(entry, str) else entry.decode("utf-8", "replace"))
    return isinstance(entry, Mapping) and looks_like_trtc(entry)


@dataclass
class _Sentence:
    ts: int
    arrival: int
    text: str
    path: str
    start_offset: int | None
    end_offset: int | None


@dataclass
class _State:
    ctx: ReadContext
    bots: set[str] = field(default_factory=set)
    targets: list[str] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    seen_bodies: set[str] = field(default_factory=set)
    seen_keys: set[tuple[Any, ...]] = field(default_factory=set)
    groups: dict[tuple[str, str, str], list[_Sentence]] = field(default_factory=dict)
    finals: dict[tuple[str, str, str], tuple[int, str, str]] = field(default_factory=dict)
    interrupted: set[tuple[str, str]] = field(default_factory=set)
    ended: bool = False
    rooms: dict[str, str] = field(default_factory=dict)
    speech_starts: list[tuple[str, int]] = field(default_factory=list)
    arrival: int = 0


def read_trtc(data: Any, ctx: ReadContext) -> ReadResult:
    """Read TRTC AI-service callbacks of one or more calls into one message per turn.

    Args:
        data: The parsed payload (see the module docstring for the accepted shapes).
        ctx: Reader settings and skipped-items sink.

    Returns:
        Turns ordered by their first sentence's time, and the skipped events.

    Raises:
        SourceFormatError: Not TRTC callbacks, or (strict) a bad callback.
    """
    state = _State(ctx=ctx, bots=set(ctx.bot_ids))
    for path, entry in _entries(data, state):
        ctx.guarded(_read_entry, entry, path, state)
    result = ReadResult(
        source=SOURCE,
        messages=_turns(state),
        skipped=ctx.skipped,
        session_ended=state.ended,
        # Also those of rounds this payload holds no turn of: the store marks them when they come.
        interruptions=sorted(state.interrupted),
    )
    humans = state.targets + [s for s in state.speakers if s not in state.bots]
    result.user_id = humans[0] if humans else None
    return result


def _entries(data: Any, state: _State) -> list[tuple[str, Any]]:
    if isinstance(data, str | bytes | bytearray):
        return [("$", data)]
    if isinstance(data, Mapping):
        if "deliveries" in data:
            _wrapper_ids(data, state)
            deliveries = get_list(SOURCE, data, "deliveries", "$")
            return [(idx("deliveries", i), d) for i, d in enumerate(deliveries)]
        return [("$", data)]
    if isinstance(data, list):
        out: list[tuple[str, Any]] = []
        for i, entry in enumerate(data):
            if isinstance(entry, Mapping) and "deliveries" in entry:
                _wrapper_ids(entry, state)
                deliveries = get_list(SOURCE, entry, "deliveries", idx("$", i))
                out.extend((idx(join(idx("$", i), "deliveries"), k), d) for k, d in enumerate(deliveries))
            else:
                out.append((idx("$", i), entry))
        return out
    fail(
        SOURCE, "$", "expected a TRTC callback body, a list of bodies or deliveries, or a deliveries wrapper"
    )


def _wrapper_ids(wrapper: Mapping[str, Any], state: _State) -> None:
    bot = wrapper.get("bot_user_id")
    if isinstance(bot, str) and bot:
        state.bots.add(clean_text(bot))
    target = wrapper.get("target_user_id")
    if isinstance(target, str) and target:
        state.targets.append(clean_text(target))


def _read_entry(entry: Any, path: str, state: _State) -> None:
    if isinstance(entry, Mapping) and ("raw_body" in entry or "body" in entry) and "EventInfo" not in entry:
        key = "raw_body" if "raw_body" in entry else "body"
        path = join(path, key)
        entry = entry[key]
    raw_key: str | None = None
    if isinstance(entry, str | bytes | bytearray):
        raw_key = entry if isinstance(entry, str) else bytes(entry).decode("utf-8", "replace")
        entry = parse_json_text(SOURCE, entry, path)
    if not isinstance(entry, Mapping):
        fail(SOURCE, path, "expected a callback body object")
    if raw_key is None:
        try:
            raw_key = json.dumps(entry, sort_keys=True, ensure_ascii=False, default=repr)
        except (TypeError, ValueError, RecursionError):
            raw_key = None
    if raw_key is not None:
        if raw_key in state.seen_bodies:
            state.ctx.skip("duplicate_delivery", path, "identical body delivered again")
            return
        state.seen_bodies.add(raw_key)
    _read_body(entry, path, state)


def _read_body(body: Mapping[str, Any], path: str, state: _State) -> None:
    ctx = state.ctx
    group = opt_int(SOURCE, body, "EventGroupId", path)
    event = opt_int(SOURCE, body, "EventType", path)
    if event is None:
        fail(SOURCE, join(path, "EventType"), "missing")
    if group is not None and group != _AI_GROUP:
        ctx.skip("event_type_ignored", join(path, "EventGroupId"), f"EventGroupId {group} (not AI service 9)")
        return
    if event == 904:
        _note_speech_start(body, path, state)
    if event == 902:
        state.ended = True  # the task ended: a run reading this ends the session (summary refresh)
    if event not in (903, 905, 906, 908):
        ctx.skip(
            "event_type_ignored", join(path, "EventType"), f"{event} {EVENT_NAMES.get(event, 'unknown')}"
        )
        return
    info_path = join(path, "EventInfo")
    info = get_dict(SOURCE, body, "EventInfo", path)
    payload_path = join(info_path, "Payload")
    payload = get_dict(SOURCE, info, "Payload", info_path)
    if event in (906, 908):
        metric = payload.get("Metric")
        tag = payload.get("Tag")
        detail = f"{event} {EVENT_NAMES[event]}"
        if metric == "interruption" and isinstance(tag, Mapping):
            round_id = opt_str(SOURCE, tag, "RoundId", join(payload_path, "Tag"), allow_int=True)
            task = opt_str(SOURCE, info, "TaskId", info_path) or ""
            if round_id:
                state.interrupted.add((task, round_id))
                detail += f" (interruption of round {round_id})"
        ctx.skip("event_type_ignored", join(path, "EventType"), detail)
        return
    task = opt_str(SOURCE, info, "TaskId", info_path) or ""
    user = opt_str(SOURCE, payload, "UserId", payload_path, allow_int=True)
    if not user:
        fail(SOURCE, join(payload_path, "UserId"), "missing or empty")
    round_id = opt_str(SOURCE, payload, "RoundId", payload_path, allow_int=True)
    if not round_id:
        fail(SOURCE, join(payload_path, "RoundId"), "missing or empty")
    text = opt_str(SOURCE, payload, "Text", payload_path)
    if text is None:
        fail(SOURCE, join(payload_path, "Text"), "missing")
    if len(text) > MAX_TEXT_CHARS:
        fail(SOURCE, join(payload_path, "Text"), f"longer than {MAX_TEXT_CHARS} characters")
    ts = _event_ms(body, info, path)
    sem_key = (task, event, ts, round_id, user, text)
    if sem_key in state.seen_keys:
        ctx.skip("duplicate_delivery", path, f"{event} of round {round_id} delivered again")
        return
    state.seen_keys.add(sem_key)
    room = opt_str(SOURCE, info, "RoomId", info_path, allow_int=True)
    if room:
        state.rooms.setdefault(task, room)
    group_key = (task, round_id, user)
    if event == 905:
        state.bots.add(user)
        state.finals[group_key] = (ts, text.strip(), path)
        return
    if user not in state.speakers:
        state.speakers.append(user)
    if not text.strip():
        ctx.skip("empty", path, f"903 of round {round_id} without text")
        return
    state.arrival += 1
    state.groups.setdefault(group_key, []).append(
        _Sentence(
            ts=ts,
            arrival=state.arrival,
            text=text,
            path=path,
            start_offset=opt_int(SOURCE, payload, "StartTimeMs", payload_path),
            end_offset=opt_int(SOURCE, payload, "EndTimeMs", payload_path),
        )
    )


def _note_speech_start(body: Mapping[str, Any], path: str, state: _State) -> None:
    # Only a hint for telling the welcome message apart; a malformed 904 is ignored anyway.
    info = body.get("EventInfo")
    payload = info.get("Payload") if isinstance(info, Mapping) else None
    user = payload.get("UserId") if isinstance(payload, Mapping) else None
    if isinstance(info, Mapping) and isinstance(user, str) and user:
        try:
            state.speech_starts.append((clean_text(user), _event_ms(body, info, path)))
        except SourceFormatError:
            pass


def _event_ms(body: Mapping[str, Any], info: Mapping[str, Any], path: str) -> int:
    for obj, key, obj_path in (
        (info, "EventMsTs", join(path, "EventInfo")),
        (body, "CallbackMsTs", path),
        (body, "CallbackTs", path),
    ):
        if obj.get(key) not in (None, ""):
            return timestamp_ms(SOURCE, obj[key], join(obj_path, key))
    fail(SOURCE, join(join(path, "EventInfo"), "EventMsTs"), "missing (and no CallbackTs)")


def _is_bot(state: _State, user: str) -> bool | None:
    """Whether ``user`` is the bot; ``None`` when nothing in the payload or the settings tells."""
    if state.bots:
        return user in state.bots
    # A 904 (ASR heard speech start) is only ever sent for the human.
    humans = set(state.targets) | {speaker for speaker, _ts in state.speech_starts}
    if humans:
        return user not in humans
    return None


def _turns(state: _State) -> list[Message]:
    human_times = [
        s.ts
        for (_task, _round, user), sents in state.groups.items()
        if _is_bot(state, user) is False
        for s in sents
    ] + [ts for user, ts in state.speech_starts if _is_bot(state, user) is False]
    first_human = min(human_times) if human_times else None
    keys = list(state.groups) + [k for k in state.finals if k not in state.groups]
    turns: list[tuple[int, int, Message]] = []
    for key in keys:
        task, round_id, user = key
        sentences = sorted(state.groups.get(key, []), key=lambda s: (s.ts, s.arrival))
        joined = join_sentences([s.text for s in sentences])
        final = state.finals.get(key)
        role_known = _is_bot(state, user)
        if role_known is None:
            # Defaulting to the user would store the bot's words as the person's.
            state.ctx.skip(
                "speaker_unknown",
                sentences[0].path if sentences else "$",
                f"903 of {user!r} in round {round_id}: no bot known (set bot_ids, or read the "
                "call with a 905 or 904 of it)",
            )
            continue
        bot = role_known
        content = final[1] if bot and final and final[1] else joined
        if not content:
            continue
        ts = sentences[0].ts if sentences else final[0] if final else 0
        interrupted = bot and (task, round_id) in state.interrupted
        original = joined if interrupted and joined and joined != content else None
        if bot:
            # Only a payload that also holds the human's speech can tell the welcome message apart.
            source = "greeting" if first_human is not None and ts < first_human else "llm"
        else:
            source = "asr"
        metadata: dict[str, Any] = {
            "path": sentences[0].path if sentences else final[2] if final else "$",
            "task_id": task,
            "sentences": [[s.ts, s.text] for s in sentences],
        }
        if final and final[1]:
            metadata["final_text"] = final[1]
        if task in state.rooms:
            metadata["room_id"] = state.rooms[task]
        offsets = [s.start_offset for s in sentences if s.start_offset is not None]
        if offsets:
            metadata["start_offset_ms"] = min(offsets)
        message = Message(
            id=stable_id("trtc", task, round_id, user),
            role="assistant" if bot else "user",
            content=content,
            channel="voice",
            source=source,
            timestamp_ms=ts,
            round_id=round_id,
            speaker_id=user,
            interrupted=interrupted,
            original=original,
            metadata=metadata,
        )
        turns.append((ts, sentences[0].arrival if sentences else 0, message))
    turns.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in turns]
