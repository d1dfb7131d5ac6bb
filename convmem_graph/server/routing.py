"""Which memory a TRTC delivery belongs to.

Modes (``ServeSettings.trtc_memory_from``):

- ``user`` (default): the human ``UserId`` of the task. A speaker is the human when it starts
  speech (904), or says a sentence (903) while the bot is known (``CONVMEM_BOT_IDS``, or the
  ``UserId`` of a 905 "bot finished speaking") and is not the bot.
- ``room``: the ``RoomId``.
- ``task``: the memory id registered for the ``TaskId`` (``convmem call start`` or
  ``POST /tasks/trtc``).

Events without a ``UserId`` (902 task ended, 906 metrics) and the bot's sentences map to the
memory of their ``TaskId``; until that is known they wait in the inbox.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any, Literal

from convmem_graph.server.inbox import TaskInfo

__all__ = ["TrtcFields", "resolve_task", "trtc_fields"]

TrtcMode = Literal["user", "room", "task"]


class TrtcFields:
    """The few fields of a TRTC callback body routing needs (absent ones are ``None``)."""

    __slots__ = ("event", "room_id", "round_id", "task_id", "user_id")

    def __init__(
        self,
        event: int | None,
        task_id: str | None,
        room_id: str | None,
        user_id: str | None,
        round_id: str | None = None,
    ):
        self.event = event
        self.task_id = task_id
        self.room_id = room_id
        self.user_id = user_id
        self.round_id = round_id


def _text(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | str) and str(value).strip():
        return str(value).strip()
    return None


def trtc_fields(body: Mapping[str, Any]) -> TrtcFields:
    """Pick ``EventType``, ``TaskId``, ``RoomId``, ``Payload.UserId`` and the round out of a callback body.

    The round is ``Payload.RoundId`` (903/904/905) or ``Payload.Tag.RoundId`` (906/908 metrics).

    Example:
        >>> f = trtc_fields({"EventType": 903, "EventInfo": {"TaskId": "t", "Payload": {"UserId": "u"}}})
        >>> f.event, f.task_id, f.user_id
        (903, 't', 'u')
    """
    info = body.get("EventInfo")
    info = info if isinstance(info, Mapping) else {}
    payload = info.get("Payload")
    payload = payload if isinstance(payload, Mapping) else {}
    event = body.get("EventType")
    event_int = int(event) if isinstance(event, int | str) and str(event).strip().isdigit() else None
    tag = payload.get("Tag")
    round_id = _text(payload.get("RoundId")) or (
        _text(tag.get("RoundId")) if isinstance(tag, Mapping) else None
    )
    return TrtcFields(
        event_int,
        _text(info.get("TaskId")),
        _text(info.get("RoomId")),
        _text(payload.get("UserId")),
        round_id,
    )


def resolve_task(info: TaskInfo, fields: TrtcFields, *, mode: TrtcMode, bot_ids: Collection[str]) -> TaskInfo:
    """Return ``info`` updated with what one delivery tells about its task's speakers and memory.

    Example:
        >>> t = resolve_task(TaskInfo("t1"), TrtcFields(904, "t1", "r1", "u_1"), mode="user", bot_ids=())
        >>> t.memory_id, t.human_id
        ('u_1', 'u_1')
    """
    user = fields.user_id
    bot = info.bot_id
    if fields.event == 905 and user and not bot:
        bot = user
    is_bot = user is not None and (user in bot_ids or user == bot)
    human = info.human_id
    if user and not is_bot and not human:
        if fields.event == 904 or (fields.event == 903 and (bot_ids or bot)):
            human = user
    memory = info.memory_id
    if memory is None:
        if mode == "user":
            memory = human
        elif mode == "room":
            memory = fields.room_id
    return replace(info, memory_id=memory, human_id=human, bot_id=bot)
