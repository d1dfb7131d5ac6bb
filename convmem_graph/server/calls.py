"""Call registration: a started TRTC or Agora call tells the server whose memory it is.

A voice call's webhooks and LLM requests name vendor ids (a TRTC ``TaskId`` and ``UserId`` s, an
Agora agent id and RTC uids), not the memory. Registering the call when it starts maps them, so
nothing depends on hand-made labels:

- TRTC: the ``TaskId`` (the answer) with ``AgentConfig.UserId`` (the bot) and
  ``AgentConfig.TargetUserId`` (the human): every 903/905/906/908/902 of the task routes to the
  memory with both speakers known from its first callback.
- Agora: the ``agent_id`` (the answer) with ``properties.agent_rtc_uid`` (the bot) and the one
  ``properties.remote_rtc_uids`` entry (the human): a 103 of the agent without the memory label
  routes to the memory.

:func:`tag_call_options` also writes the memory id where each vendor copies it into every LLM
request (TRTC ``LLMConfig.MetaInfo``, Agora ``llm.params``) and, for Agora, into ``labels`` (which
103 carries), so the memory proxy and the webhooks find it even without the registration. An
Agora join's ``llm.params`` also name the call by its channel (``convmem_call``): its custom-LLM
requests carry no other trace of the call, and the 103 names the channel too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from convmem_graph.server.inbox import Inbox

__all__ = ["AGORA_TASK_PREFIX", "CALL_PARAM", "agora_task_id", "register_call", "tag_call_options"]

#: The ``llm.params`` key (a top-level field of every Agora custom-LLM request) naming the call
#: by its RTC channel; the memory proxy reads it and takes it out before the model sees the body.
CALL_PARAM = "convmem_call"

#: Agora agents share the task table with TRTC tasks under this prefix (ids cannot collide).
AGORA_TASK_PREFIX = "agora:"

Vendor = Literal["trtc", "agora"]


def agora_task_id(agent_id: str) -> str:
    """The task-table key of an Agora agent.

    Example:
        >>> agora_task_id("A42AF8")
        'agora:A42AF8'
    """
    return f"{AGORA_TASK_PREFIX}{agent_id}"


def _text(value: Any) -> str | None:
    if isinstance(value, int | str) and not isinstance(value, bool) and str(value).strip():
        return str(value).strip()
    return None


def tag_call_options(
    vendor: Vendor, options: Mapping[str, Any], memory_id: str, *, label: str = "memory_id"
) -> dict[str, Any]:
    """Return call options that carry ``memory_id`` wherever the vendor passes it on.

    Values already set are kept (a team that names the memory itself is not overruled).

    Example:
        >>> tag_call_options("trtc", {"llm": {"Model": "m"}}, "u_1")["llm"]["MetaInfo"]
        {'memory_id': 'u_1'}
        >>> opts = tag_call_options("agora", {"properties": {"channel": "c"}}, "u_1")
        >>> opts["params"], opts["properties"]["labels"]
        ({'memory_id': 'u_1', 'convmem_call': 'c'}, {'memory_id': 'u_1'})
    """
    out = copy.deepcopy(dict(options))
    if vendor == "trtc":
        llm = out.setdefault("llm", {})
        meta = llm.get("MetaInfo")
        llm["MetaInfo"] = {"memory_id": memory_id, **(meta if isinstance(meta, Mapping) else {})}
        return out
    params = out.get("params")
    tags: dict[str, Any] = {"memory_id": memory_id}
    properties = out.get("properties")
    channel = _text(properties.get("channel")) if isinstance(properties, Mapping) else None
    if channel is not None:
        # The call's name in every custom-LLM request (Agora merges params into the body, and
        # names no agent or channel itself): the proxy stores its turns with it, so the store
        # links them to the 103's copies of the call (convmem_graph._copies.copy_call).
        tags[CALL_PARAM] = channel
    out["params"] = {**tags, **(params if isinstance(params, Mapping) else {})}
    if isinstance(properties, dict):
        labels = properties.get("labels")
        properties["labels"] = {label: memory_id, **(labels if isinstance(labels, Mapping) else {})}
    return out


def register_call(
    inbox: Inbox, vendor: Vendor, body: Mapping[str, Any], started_id: str, memory_id: str
) -> None:
    """Record that the call started with ``body`` (answered with ``started_id``) is ``memory_id``'s.

    Args:
        inbox: The server's inbox (its task table).
        vendor: ``trtc`` or ``agora``.
        body: The start request as sent (``StartAIConversation`` or Agora ``POST /join``).
        started_id: The TRTC ``TaskId`` or the Agora ``agent_id`` the vendor answered.
        memory_id: The memory the call belongs to.
    """
    if vendor == "trtc":
        agent = body.get("AgentConfig")
        agent = agent if isinstance(agent, Mapping) else {}
        inbox.register_task(
            started_id,
            memory_id,
            human_id=_text(agent.get("TargetUserId")),
            bot_id=_text(agent.get("UserId")),
        )
        return
    properties = body.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    remote = properties.get("remote_rtc_uids")
    human = _text(remote[0]) if isinstance(remote, list) and len(remote) == 1 else None
    inbox.register_task(
        agora_task_id(started_id),
        memory_id,
        human_id=human,
        bot_id=_text(properties.get("agent_rtc_uid")),
    )
