"""Tencent Cloud Chat (IM) ``admin_getroammsg`` responses, one page or several pages of a query.

Accepted shapes: one response (``{ActionStatus, MsgList, ...}``), a list of responses, a list of
``{request, response}`` exchanges, or ``{"pages": [{request, response}, ...]}`` (our fixture's
exchange file). Pages are merged without duplicates by ``MsgKey``; a later streaming state of the
same message wins over an earlier one.

Rules decided here:

- Role: ``From_Account`` starting with ``@RBT#`` or listed in the bot ids -> ``assistant``.
- Text: ``TIMTextElem`` texts are concatenated in element order. Chatbot ``TIMCustomElem`` whose
  ``Data`` is JSON with ``chatbotPlugin`` 1 or 2: ``src`` 2 joins ``chunks`` in order; partial when
  ``isFinished`` is 0, and for generation 1 also when it is missing (generation 2 treats missing as
  finished, like Tencent's TUIKit). ``src`` 15 cards, 7/22 control, 3 passthrough and 23 errors are
  skipped with a reason; a ``src`` 22 interrupt also marks the message it names ``interrupted``.
- Other elements (face, image, sound, custom non-bot data, unknown types) become a short
  placeholder such as ``[表情]`` joined with the text, or are dropped when the config says
  ``non_text_elements: skip`` (a message with nothing else is then skipped as ``non_text``).
- Recalled messages (``MsgFlagBits`` bit 8) are skipped as ``recalled``.
- Channel ``im``; source ``message`` for user text, ``chatbot`` for bot protocol messages;
  id from ``MsgKey`` (or ``{MsgSeq}_{MsgRandom}_{MsgTimeStamp}`` when the key is missing).
- An error envelope (``ActionStatus: FAIL`` or a non-zero ``ErrorCode``) raises, naming both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from convmem_graph._ids import stable_id
from convmem_graph.errors import SourceFormatError
from convmem_graph.models import Message, ReadResult
from convmem_graph.sources._common import (
    BOT_PREFIX,
    MAX_TEXT_CHARS,
    ReadContext,
    clean_text,
    dedupe_by_id,
    fail,
    get_list,
    idx,
    join,
    opt_int,
    opt_str,
    parse_json_text,
    timestamp_ms,
)

__all__ = ["PLACEHOLDERS", "looks_like_tencent_im", "read_tencent_im"]

SOURCE = "tencent_im"
#: Placeholder text per non-text element type (``non_text_elements: placeholder``).
PLACEHOLDERS = {
    "TIMFaceElem": "[表情]",
    "TIMImageElem": "[图片]",
    "TIMSoundElem": "[语音]",
    "TIMVideoFileElem": "[视频]",
    "TIMFileElem": "[文件]",
    "TIMLocationElem": "[位置]",
    "TIMRelayElem": "[聊天记录]",
    "TIMCustomElem": "[自定义消息]",
}
_UNKNOWN_PLACEHOLDER = "[消息]"
_RECALLED = 8
_SKIP_SRC = {
    15: ("chatbot_card", "welcome / clarify card"),
    7: ("chatbot_control", "welcome trigger"),
    22: ("chatbot_control", "user interrupted generation"),
    3: ("chatbot_passthrough", "app passthrough data"),
    23: ("chatbot_error", "error while generating"),
}


def looks_like_tencent_im(data: Any) -> bool:
    """Return whether ``data`` looks like admin_getroammsg response(s) or our exchange file."""
    if isinstance(data, Mapping):
        if isinstance(data.get("pages"), list):
            return True
        if "MsgList" in data or ("ActionStatus" in data and "ErrorCode" in data):
            return True
        return isinstance(data.get("response"), Mapping) and "MsgList" in data["response"]
    if isinstance(data, list) and data:
        return all(isinstance(d, Mapping) and looks_like_tencent_im(d) for d in data[:50])
    return False


@dataclass
class _State:
    ctx: ReadContext
    result: ReadResult
    messages: list[Message] = field(default_factory=list)
    order: dict[str, tuple[int, int]] = field(default_factory=dict)
    interrupts: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)

    def is_bot(self, account: str) -> bool:
        return account.startswith(BOT_PREFIX) or account in self.ctx.bot_ids


def read_tencent_im(data: Any, ctx: ReadContext) -> ReadResult:
    """Read one or several ``admin_getroammsg`` pages into messages ordered by time.

    Args:
        data: The parsed payload (see the module docstring for the accepted shapes).
        ctx: Reader settings and skipped-items sink.

    Returns:
        Messages ordered by (timestamp, ``MsgSeq``) and the skipped items.

    Raises:
        SourceFormatError: Not an IM response, an error envelope, or (strict) a bad message.
    """
    state = _State(ctx=ctx, result=ReadResult(source=SOURCE))
    for path, exchange in _pages(data):
        request = exchange.get("request") if "response" in exchange else None
        response = exchange["response"] if "response" in exchange else exchange
        resp_path = join(path, "response") if "response" in exchange else path
        if not isinstance(response, Mapping):
            fail(SOURCE, resp_path, "expected a response object")
        if isinstance(request, Mapping):
            for key in ("Operator_Account", "From_Account", "Peer_Account", "To_Account"):
                value = request.get(key)
                if isinstance(value, str) and value:
                    state.accounts.append(clean_text(value))
        _read_response(response, resp_path, state)
    by_key = {m.metadata.get("msg_key"): m for m in state.messages}
    for key in state.interrupts:
        target = by_key.get(key)
        if target is not None and target.role == "assistant":
            target.interrupted = True
    messages = dedupe_by_id(ctx, state.messages, _completeness)
    messages.sort(key=lambda m: (m.timestamp_ms, state.order.get(m.id, (0, 0))))
    result = state.result
    result.messages = messages
    result.skipped = ctx.skipped
    result.user_id = next((a for a in state.accounts if not state.is_bot(a)), None)
    return result


def _completeness(m: Message) -> int:
    # A finished streaming state beats a partial one; a longer text beats a shorter one.
    return (0 if m.partial else 1_000_000_000) + len(m.content)


def _pages(data: Any) -> list[tuple[str, Mapping[str, Any]]]:
    if isinstance(data, Mapping) and "pages" in data:
        pages = get_list(SOURCE, data, "pages", "$")
        out = []
        for i, page in enumerate(pages):
            if not isinstance(page, Mapping):
                fail(SOURCE, idx("pages", i), "expected a {request, response} object")
            out.append((idx("pages", i), page))
        return out
    if isinstance(data, Mapping):
        return [("$", data)]
    if isinstance(data, list):
        out = []
        for i, page in enumerate(data):
            if not isinstance(page, Mapping):
                fail(SOURCE, idx("$", i), "expected a response object")
            out.append((idx("$", i), page))
        return out
    fail(SOURCE, "$", "expected an admin_getroammsg response object or a list of them")


def _read_response(response: Mapping[str, Any], path: str, state: _State) -> None:
    status = response.get("ActionStatus")
    code = response.get("ErrorCode", 0)
    if status == "FAIL" or (code not in (0, "0", None)):
        info = response.get("ErrorInfo")
        info_text = clean_text(info)[:200] if isinstance(info, str) else ""
        fail(
            SOURCE, join(path, "ErrorCode"), f"error envelope: ErrorCode {code!r:.20} ErrorInfo {info_text!r}"
        )
    if "MsgList" not in response:
        if status == "OK" or "MsgCnt" in response:
            return  # an empty page
        fail(SOURCE, join(path, "MsgList"), "missing")
    msg_list = get_list(SOURCE, response, "MsgList", path)
    for i, raw in enumerate(msg_list):
        item_path = idx(join(path, "MsgList"), i)
        msg = state.ctx.guarded(_read_message, raw, item_path, state)
        if isinstance(msg, Message):
            seq = msg.metadata.get("msg_seq")
            state.order.setdefault(msg.id, (seq if isinstance(seq, int) else 0, len(state.order)))
            state.messages.append(msg)


def _read_message(raw: Any, path: str, state: _State) -> Message | None:
    ctx = state.ctx
    if not isinstance(raw, Mapping):
        fail(SOURCE, path, "expected a message object")
    sender = opt_str(SOURCE, raw, "From_Account", path)
    if not sender:
        fail(SOURCE, join(path, "From_Account"), "missing or empty")
    receiver = opt_str(SOURCE, raw, "To_Account", path)
    if raw.get("MsgTimeStamp") is None:
        fail(SOURCE, join(path, "MsgTimeStamp"), "missing")
    ts = timestamp_ms(SOURCE, raw["MsgTimeStamp"], join(path, "MsgTimeStamp"))
    seq = opt_int(SOURCE, raw, "MsgSeq", path)
    key = opt_str(SOURCE, raw, "MsgKey", path)
    if not key:
        rnd = opt_int(SOURCE, raw, "MsgRandom", path)
        if seq is None or rnd is None:
            fail(SOURCE, join(path, "MsgKey"), "missing, and MsgSeq/MsgRandom are missing too")
        key = f"{seq}_{rnd}_{raw['MsgTimeStamp']}"
    for account in (sender, receiver):
        if account:
            state.accounts.append(account)
    flags = opt_int(SOURCE, raw, "MsgFlagBits", path) or 0
    if flags & _RECALLED:
        ctx.skip("recalled", path, f"MsgKey {key}")
        return None
    body = get_list(SOURCE, raw, "MsgBody", path)
    pieces: list[str] = []
    reasons: list[tuple[str, str]] = []
    has_placeholder = False
    chatbot = False
    partial = False
    for j, elem in enumerate(body):
        elem_path = idx(join(path, "MsgBody"), j)
        kind, value = _element(elem, elem_path, state)
        if kind == "text":
            pieces.append(value)
        elif kind == "chatbot":
            pieces.append(value)
            chatbot = True
        elif kind == "partial":
            pieces.append(value)
            chatbot = partial = True
        elif kind == "placeholder":
            has_placeholder = True
            if ctx.config.non_text_elements == "placeholder":
                pieces.append(value)
        else:
            reasons.append((kind, value))
    text = "".join(pieces).strip()
    if not text:
        if reasons:
            ctx.skip(reasons[0][0], path, f"{reasons[0][1]} (MsgKey {key})")
        elif has_placeholder:
            ctx.skip("non_text", path, f"only non-text elements (MsgKey {key})")
        else:
            ctx.skip("empty", path, f"no text (MsgKey {key})")
        return None
    if len(text) > MAX_TEXT_CHARS:
        fail(SOURCE, join(path, "MsgBody"), f"text longer than {MAX_TEXT_CHARS} characters")
    metadata: dict[str, Any] = {"path": path, "msg_key": key}
    if seq is not None:
        metadata["msg_seq"] = seq
    if receiver:
        metadata["to_account"] = receiver
    return Message(
        id=stable_id("im", key),
        role="assistant" if state.is_bot(sender) else "user",
        content=text,
        channel="im",
        source="chatbot" if chatbot else "message",
        timestamp_ms=ts,
        speaker_id=sender,
        partial=partial,
        metadata=metadata,
    )


def _element(elem: Any, path: str, state: _State) -> tuple[str, str]:
    """Classify one MsgBody element: ("text"|"chatbot"|"partial"|"placeholder"|skip reason, value)."""
    if not isinstance(elem, Mapping):
        fail(SOURCE, path, "expected an element object")
    kind = opt_str(SOURCE, elem, "MsgType", path)
    if not kind:
        fail(SOURCE, join(path, "MsgType"), "missing or empty")
    content = elem.get("MsgContent")
    content_path = join(path, "MsgContent")
    if kind == "TIMTextElem":
        if not isinstance(content, Mapping):
            fail(SOURCE, content_path, "expected an object")
        return "text", opt_str(SOURCE, content, "Text", content_path) or ""
    if kind == "TIMCustomElem" and isinstance(content, Mapping):
        data = content.get("Data")
        if isinstance(data, str) and data.lstrip().startswith("{"):
            bot = _chatbot(data, join(content_path, "Data"), state)
            if bot is not None:
                return bot
    return "placeholder", PLACEHOLDERS.get(kind, _UNKNOWN_PLACEHOLDER)


def _chatbot(data: str, path: str, state: _State) -> tuple[str, str] | None:
    try:
        payload = parse_json_text(SOURCE, data, path)
    except SourceFormatError:  # custom data that is not JSON is app data, not a bot message
        return None
    if not isinstance(payload, Mapping) or "chatbotPlugin" not in payload:
        return None
    plugin = opt_int(SOURCE, payload, "chatbotPlugin", path)
    if plugin not in (1, 2):
        return None
    src = opt_int(SOURCE, payload, "src", path)
    if src == 2:
        chunks = get_list(SOURCE, payload, "chunks", path)
        texts = []
        for k, chunk in enumerate(chunks):
            if not isinstance(chunk, str):
                fail(SOURCE, idx(join(path, "chunks"), k), "expected a string chunk")
            texts.append(clean_text(chunk))
        finished = opt_int(SOURCE, payload, "isFinished", path)
        partial = finished == 0 or (plugin == 1 and finished != 1)
        return ("partial" if partial else "chatbot"), "".join(texts)
    if src == 22:
        target = payload.get("msgKey")
        if isinstance(target, str) and target:
            state.interrupts.append(clean_text(target))
    if src in _SKIP_SRC:
        reason, detail = _SKIP_SRC[src]
        if src == 23:
            error = payload.get("errorInfo")
            if isinstance(error, str) and error:
                detail = f"{detail}: {clean_text(error)[:200]}"
        return reason, f"chatbotPlugin {plugin} src {src}: {detail}"
    return "chatbot_unknown", f"chatbotPlugin {plugin} src {src}"
