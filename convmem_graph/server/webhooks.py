"""Vendor webhooks: ``POST /webhooks/trtc`` (AI-service callbacks) and ``POST /webhooks/agora`` (NCS).

Each delivery is size-capped (413), signature-checked on the raw bytes before any parsing (401),
stored durably in the inbox and only then answered 200, within milliseconds: the lifecycle runs
later in the worker. A retry of a stored delivery is answered 200 and stored nothing. Every
genuine delivery gets 200, also events we do not use (a vendor retries a non-2xx).

Exact retries: TRTC resends the same body; its key is the SHA-256 of the body without the
send-time fields (``CallbackTs``/``CallbackMsTs``). Agora's ``notifyMs`` changes on every retry,
so its key is the ``noticeId``.

Input boundary (:mod:`convmem_graph.server._boundary`), after the signature: a signed delivery
whose body is nested too deep, holds NUL or a lone surrogate, an ``EventType`` that is no 32-bit
number, or an id (TRTC ``TaskId``/``RoomId``/``UserId``/``RoundId``, Agora ``agent_id`` and memory
label) outside the identifier rule is kept in the inbox as ``failed`` with a note naming the field,
and answered 200: it is genuine, a retry cannot fix it, and nothing of it reaches the queue.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from convmem_graph.server._boundary import BoundaryError, BoundaryRoute, check_id, parse_json, safe_text
from convmem_graph.server._http import read_capped_body
from convmem_graph.server.calls import agora_task_id
from convmem_graph.server.inbox import Inbox
from convmem_graph.server.routing import trtc_fields
from convmem_graph.server.settings import ServeSettings
from convmem_graph.server.worker import WorkerHandle
from convmem_graph.signatures import verify_agora_signature, verify_trtc_signature

__all__ = ["build_webhook_router", "delivery_key"]

logger = logging.getLogger(__name__)

_SEND_TIME_FIELDS = ("CallbackTs", "CallbackMsTs", "notifyMs")
_ACK = {"code": 0, "message": "ok"}
#: The ``Integer`` column ``cm_serve_inbox.event`` holds 32 bits; TRTC event types have 3 digits.
_MAX_EVENT = 2**31 - 1
#: TRTC id fields (``EventInfo`` and ``EventInfo.Payload``) stored in ``varchar(256)`` columns.
_TRTC_IDS = (
    ("TaskId",),
    ("RoomId",),
    ("Payload", "UserId"),
    ("Payload", "RoundId"),
    ("Payload", "Tag", "RoundId"),
)
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Stored, a retry of a stored delivery, an event not used, or kept as failed"},
    401: {"description": "Missing or wrong signature, a stale send time, or no secret configured"},
    413: {"description": "Body over the size limit"},
}


class _WebhookRoute(BoundaryRoute):
    """Webhooks read their body themselves (capped, signature first): no body check here."""

    check_body = False
    default_responses: ClassVar[Mapping[int | str, dict[str, Any]]] = {}


def delivery_key(vendor: str, doc: Any, raw: bytes) -> str:
    """Return the idempotence key of a delivery: equal for retries of one event.

    Example:
        >>> delivery_key("trtc", {"EventType": 903, "CallbackTs": 1}, b"") == delivery_key(
        ...     "trtc", {"EventType": 903, "CallbackTs": 2}, b"")
        True
    """
    if vendor == "agora" and isinstance(doc, dict) and isinstance(doc.get("noticeId"), str | int):
        return f"agora:notice:{doc['noticeId']}"[:128]
    if isinstance(doc, dict):
        stable = {k: v for k, v in doc.items() if k not in _SEND_TIME_FIELDS}
        material = json.dumps(stable, sort_keys=True, ensure_ascii=False).encode("utf-8")
    else:
        material = raw
    return f"{vendor}:{hashlib.sha256(material).hexdigest()}"


def _parse(raw: bytes) -> tuple[Any, str | None]:
    """Return ``(the body's JSON object, None)`` or ``(None, why it is unusable)``."""
    try:
        doc = parse_json(raw)
    except BoundaryError as exc:
        return None, str(exc)
    if not isinstance(doc, dict):
        return None, "body is not a JSON object"
    return doc, None


def _trtc_problem(doc: Mapping[str, Any]) -> str | None:
    """Return why a TRTC body cannot be routed (a bad ``EventType`` or id), or None."""
    event = doc.get("EventType")
    digits = event.strip() if isinstance(event, str) else None
    if isinstance(event, int) and not isinstance(event, bool):
        ok = 0 <= event <= _MAX_EVENT
    elif digits is not None:
        # "²".isdigit() is True but int("²") fails; 5,000 digits fail int() too: ASCII, 10 at most.
        ok = not digits or (
            digits.isascii() and digits.isdigit() and len(digits) <= 10 and int(digits) <= _MAX_EVENT
        )
    else:
        ok = event is None
    if not ok:
        return f"EventType: must be an event number (0-{_MAX_EVENT}), got {str(event)[:40]!r}"
    info = doc.get("EventInfo")
    for path in _TRTC_IDS:
        value: Any = info
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip():
            continue  # absent: routing treats it as missing
        try:
            check_id(str(value).strip(), "EventInfo." + ".".join(path))
        except BoundaryError as exc:
            return str(exc)
    return None


def _agora_problem(memory_id: Any, agent_id: Any, label: str) -> str | None:
    """Return why an Agora 103's memory label or agent id breaks the identifier rule, or None."""
    try:
        if isinstance(memory_id, str) and memory_id.strip():
            check_id(memory_id.strip(), f"payload.labels.{label}", "memory_id")
        if isinstance(agent_id, str) and agent_id:
            check_id(agent_id, "payload.agent_id")
    except BoundaryError as exc:
        return str(exc)
    return None


def build_webhook_router(inbox: Inbox, worker: WorkerHandle, settings: ServeSettings) -> APIRouter:
    """Return the router with the TRTC and Agora webhooks."""
    router = APIRouter(tags=["webhooks"], route_class=_WebhookRoute, responses=_RESPONSES)

    @router.post("/webhooks/trtc", summary="TRTC AI-conversation callbacks (EventGroupId 9)")
    async def trtc_webhook(request: Request) -> dict[str, Any]:
        raw = await read_capped_body(request, settings.max_body_bytes)
        key = settings.secret("trtc_callback_key")
        if key is None:
            logger.error("TRTC delivery refused: CONVMEM_TRTC_CALLBACK_KEY is not set")
            raise HTTPException(401, "TRTC callback key is not configured on this server")
        if not verify_trtc_signature(
            raw,
            request.headers.get("Sign"),
            key,
            max_body_bytes=settings.max_body_bytes,
            tolerance_ms=settings.webhook_tolerance_ms or None,
        ):
            logger.warning("TRTC delivery refused: missing or wrong Sign header, or a stale CallbackTs")
            raise HTTPException(401, "missing or wrong Sign header, or CallbackTs outside the replay window")
        doc, problem = _parse(raw)
        # NUL bytes of an unparsable body would not fit a PostgreSQL text column.
        text = safe_text(raw.decode("utf-8", "replace"))
        if problem is None and doc is not None:
            problem = _trtc_problem(doc)
        if problem is not None or doc is None:
            # Signed but unusable: keep it for a human, answer 200 (a retry cannot fix it).
            note = problem or "body is not a JSON object"
            logger.warning("TRTC delivery kept as failed: %s", note)
            # A parsed body keeps the retry-stable key: TRTC's retries of it store one failed row.
            key = delivery_key("trtc", doc, raw)
            await run_in_threadpool(inbox.add, "trtc", key, text, status="failed", note=note)
            return _ACK
        fields = trtc_fields(doc)
        added = await run_in_threadpool(
            inbox.add,
            "trtc",
            delivery_key("trtc", doc, raw),
            text,
            event=fields.event,
            task_id=fields.task_id,
            round_id=fields.round_id,
        )
        if added:
            worker.wake()
        else:
            logger.info("TRTC delivery of task %s event %s was a retry", fields.task_id, fields.event)
        return _ACK

    @router.post("/webhooks/agora", summary="Agora ConvoAI notifications (NCS)")
    async def agora_webhook(request: Request) -> dict[str, Any]:
        raw = await read_capped_body(request, settings.max_agora_body_bytes)
        secret = settings.secret("agora_webhook_secret")
        if secret is None:
            logger.error("Agora delivery refused: CONVMEM_AGORA_WEBHOOK_SECRET is not set")
            raise HTTPException(401, "Agora webhook secret is not configured on this server")
        if not verify_agora_signature(
            raw,
            request.headers,
            secret,
            max_body_bytes=settings.max_agora_body_bytes,
            tolerance_ms=settings.webhook_tolerance_ms or None,
        ):
            logger.warning("Agora delivery refused: missing or wrong signature header, or a stale notifyMs")
            raise HTTPException(
                401,
                "missing or wrong Agora-Signature-V2 / Agora-Signature, or notifyMs outside the window",
            )
        doc, problem = _parse(raw)
        if problem is not None or doc is None:
            # Signed but unusable: kept for a human like TRTC's, answered 200.
            note = problem or "body is not a JSON object"
            logger.warning("Agora delivery kept as failed: %s", note)
            text = safe_text(raw.decode("utf-8", "replace"))
            key = delivery_key("agora", None, raw)
            await run_in_threadpool(inbox.add, "agora", key, text, status="failed", note=note)
            return _ACK
        event = doc.get("eventType")
        if event != 103:
            logger.info("Agora event %r ignored (only 103 agent history is memory)", event)
            return _ACK
        payload = doc.get("payload")
        labels = payload.get("labels") if isinstance(payload, dict) else None
        memory_id = labels.get(settings.agora_memory_label) if isinstance(labels, dict) else None
        agent_id = payload.get("agent_id") if isinstance(payload, dict) else None
        problem = _agora_problem(memory_id, agent_id, settings.agora_memory_label)
        if problem is not None:
            logger.warning("Agora delivery kept as failed: %s", problem)
            key = delivery_key("agora", doc, raw)
            await run_in_threadpool(
                inbox.add, "agora", key, raw.decode("utf-8"), event=103, status="failed", note=problem
            )
            return _ACK
        if (
            (not isinstance(memory_id, str) or not memory_id.strip())
            and isinstance(agent_id, str)
            and agent_id
        ):
            # No label: the agent registered at call start (convmem call start) names the memory.
            registered = await run_in_threadpool(inbox.task, agora_task_id(agent_id))
            memory_id = registered.memory_id if registered is not None else None
        text = raw.decode("utf-8")
        key = delivery_key("agora", doc, raw)
        if not isinstance(memory_id, str) or not memory_id.strip():
            note = f"103 without payload.labels.{settings.agora_memory_label} of an agent not registered"
            logger.warning("Agora delivery kept as failed: %s", note)
            await run_in_threadpool(inbox.add, "agora", key, text, event=103, status="failed", note=note)
            return _ACK
        added = await run_in_threadpool(inbox.add, "agora", key, text, event=103, memory_id=memory_id.strip())
        if added:
            worker.wake()
        return _ACK

    return router
