"""Vendor webhooks: ``POST /webhooks/trtc`` (AI-service callbacks) and ``POST /webhooks/agora`` (NCS).

Each delivery is size-capped (413), signature-checked on the raw bytes before any parsing (401),
stored durably in the inbox and only then answered 200, within milliseconds: the lifecycle runs
later in the worker. A retry of a stored delivery is answered 200 and stored nothing. Every
genuine delivery gets 200, also events we do not use (a vendor retries a non-2xx).

Exact retries: TRTC resends the same body; its key is the SHA-256 of the body without the
send-time fields (``CallbackTs``/``CallbackMsTs``). Agora's ``notifyMs`` changes on every retry,
so its key is the ``noticeId``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

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
    try:
        return json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"body is not UTF-8 JSON ({type(exc).__name__})"


def build_webhook_router(inbox: Inbox, worker: WorkerHandle, settings: ServeSettings) -> APIRouter:
    """Return the router with the TRTC and Agora webhooks."""
    router = APIRouter(tags=["webhooks"])

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
        text = raw.decode("utf-8", "replace")
        if problem is not None or not isinstance(doc, dict):
            # Signed but unreadable: keep it for a human, answer 200 (a retry cannot fix it).
            note = problem or "body is not a JSON object"
            logger.warning("TRTC delivery kept as failed: %s", note)
            await run_in_threadpool(
                inbox.add, "trtc", delivery_key("trtc", None, raw), text, status="failed", note=note
            )
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
        if problem is not None or not isinstance(doc, dict):
            logger.warning("Agora delivery ignored: %s", problem or "body is not a JSON object")
            return _ACK
        event = doc.get("eventType")
        if event != 103:
            logger.info("Agora event %r ignored (only 103 agent history is memory)", event)
            return _ACK
        payload = doc.get("payload")
        labels = payload.get("labels") if isinstance(payload, dict) else None
        memory_id = labels.get(settings.agora_memory_label) if isinstance(labels, dict) else None
        agent_id = payload.get("agent_id") if isinstance(payload, dict) else None
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
