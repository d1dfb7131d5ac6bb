"""The inject preview: the exact vendor payload for a query, and how its memory block was chosen.

The payload comes from :meth:`ConvMemory.payload` (what a call start would send). The memory block
is built again with :meth:`ConvMemory.memory_block` (the same query-time snapshot and the same turns
left out) to show each part's tokens against the budget and, per fact, whether it went in and why not.
Fields the block may gain later (why items were chosen) are shown as they come.
"""

from __future__ import annotations

import json
from typing import Any

from convmem_graph.memory import ConvMemory
from convmem_graph.models import MemorySnapshot
from convmem_graph.payloads.memory_block import VARIABLE_LABELS
from convmem_graph.payloads.relevance import lexical_scores
from convmem_graph.payloads.render import sent_turns
from convmem_graph.viewer._html import esc, json_block, layout, memory_url, table
from convmem_graph.viewer.pages import memory_tabs

__all__ = ["DEMO_OPTIONS", "VENDOR_CHOICES", "inject_page"]

#: Vendors offered by the preview, with a label.
VENDOR_CHOICES: dict[str, str] = {
    "trtc": "TRTC StartAIConversation body",
    "trtc-llmconfig": "TRTC LLMConfig string",
    "agora": "Agora join body",
    "agora-update": "Agora runtime update",
    "agora-custom": "Agora custom LLM messages",
    "openai": "OpenAI messages",
}

#: Placeholder vendor options so every payload renders; replace them with your own in the form.
DEMO_OPTIONS: dict[str, dict[str, Any]] = {
    "trtc": {
        "sdk_app_id": 1400000000,
        "room_id": "demo_room",
        "agent_config": {"UserId": "ai_bot", "UserSig": "YOUR_BOT_USERSIG", "TargetUserId": "user"},
        "tts_config": {"TTSType": "flow", "VoiceId": "YOUR_VOICE_ID"},
        "llm": {
            "LLMType": "openai",
            "Model": "qwen-plus",
            "APIUrl": "https://llm.example.com/v1/chat/completions",
        },
    },
    "trtc-llmconfig": {"llm": {"LLMType": "openai", "Model": "qwen-plus"}},
    "agora": {
        "name": "demo-agent",
        "properties": {
            "channel": "demo_channel",
            "token": "YOUR_RTC_TOKEN",
            "agent_rtc_uid": "9001",
            "remote_rtc_uids": ["10086"],
        },
        "params": {"model": "qwen-plus"},
        "llm": {"url": "https://llm.example.com/v1/chat/completions", "api_key": "YOUR_LLM_API_KEY"},
    },
    "agora-update": {
        "params": {"model": "qwen-plus"},
        "llm": {"url": "https://llm.example.com/v1/chat/completions"},
    },
    "agora-custom": {},
    "openai": {},
}

_KNOWN_BLOCK_FIELDS = {
    "text",
    "tokens",
    "included_fragment_ids",
    "dropped_fragment_ids",
    "flagged",
    "language",
    "part_tokens",
}


def _parse_options(raw: str, vendor: str) -> dict[str, Any]:
    if not raw.strip():
        return dict(DEMO_OPTIONS.get(vendor, {}))
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"options: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise ValueError("options: a JSON object of vendor options is expected")
    return {k: v for k, v in doc.items() if not k.startswith("_")}  # "_comment" keys of example files


def _decoded(llm_config: str) -> str:
    # TRTC wants LLMConfig as a JSON string; decoded, a reader can see the SystemPrompt lines.
    try:
        doc = json.loads(llm_config)
    except json.JSONDecodeError:
        return ""
    return f"<h3>LLMConfig, decoded</h3>{json_block(doc, css='json decoded')}"


def _fragment_rows(
    mem: ConvMemory, memory_id: str, snapshot: MemorySnapshot, block: Any, query: str, now: int
) -> list[str]:
    included = list(getattr(block, "included_fragment_ids", []))
    position = {fid: i for i, fid in enumerate(included, 1)}
    flagged = set(getattr(block, "flagged", []))
    in_snapshot = {f.id for f in snapshot.fragments}
    active = mem.fragments(memory_id)
    scores = lexical_scores(query, [f.content for f in active]) if query.strip() else {}
    best = max(scores.values(), default=0.0)
    rows = []
    order = sorted(
        range(len(active)), key=lambda i: (active[i].id not in position, position.get(active[i].id, 0))
    )
    for i in order:
        f = active[i]
        score = scores.get(i, 0.0) / best if best else 0.0
        if f.id in position:
            state, why = "included", f"#{position[f.id]} in the block"
            why += " · matches the query" if score > 0 else " · by recency (no query term)"
        elif f.transient and f.expires_at is not None and f.expires_at <= now:
            state, why = "cut", "transient fact has expired"
        elif f.id not in in_snapshot:
            state, why = "cut", "not among the strongest facts cached in the call-start snapshot"
        else:
            state, why = "cut", "over the budget or max_fragments, or covered by a variable"
        if f.id in flagged:
            why += " · looks like an instruction: quoted and flagged"
        rows.append(
            f'<tr class="pick {state}" data-fact="{esc(f.id)}"><td>{esc(f.content)}</td>'
            f'<td>{esc(state)}</td><td class="num">{score:.2f}</td><td>{esc(why)}</td></tr>'
        )
    return rows


def _other_rows(mem: ConvMemory, memory_id: str, block: Any) -> list[str]:
    # Variables and the summary: whether their text made it into the block, and why not.
    text = getattr(block, "text", "") or ""
    rows = []
    for name, v in mem.variables(memory_id).items():
        parts = [str(x) for x in v.value] if isinstance(v.value, list) else [str(v.value)]
        # The profile line reads "<label>: <value>" (labels per language, e.g. 城市 / City).
        label = VARIABLE_LABELS.get(name, {}).get(getattr(block, "language", "zh"), name)
        shown = f"{label}: " in text
        why = f"{v.origin} value" + (
            " · a manual value is kept first" if v.origin == "manual" else " · inferred from facts"
        )
        if not shown:
            why += " · left out: over the budget, or a field the block does not show"
        state = "included" if shown else "cut"
        rows.append(
            f'<tr class="pick {state}"><td>variable {esc(name)} = {esc(", ".join(parts))}</td>'
            f"<td>{state}</td><td></td><td>{esc(why)}</td></tr>"
        )
    summary = mem.summary(memory_id)
    if summary is not None:
        head = summary.text.strip()[:12]
        if summary.origin == "extractive":
            state, why = (
                "cut",
                "extractive summary restates the variables and facts: memory blocks leave it out",
            )
        elif head and head in text:
            state, why = "included", f"model summary, {summary.tokens} tokens (cut at a sentence when tight)"
        else:
            state, why = "cut", "model summary did not fit the budget after the variables"
        rows.append(
            f'<tr class="pick {state}"><td>summary (version {summary.version})</td><td>{state}</td>'
            f"<td></td><td>{esc(why)}</td></tr>"
        )
    return rows


def inject_page(
    mem: ConvMemory,
    memory_id: str,
    *,
    vendor: str = "trtc",
    query: str = "",
    persona: str = "",
    budget: int | None = None,
    options_text: str = "",
) -> str:
    """Render the inject preview of one memory.

    Raises:
        MemoryNotFoundError: If the memory does not exist.
    """
    mem.info(memory_id)
    vendor = vendor if vendor in VENDOR_CHOICES else "trtc"
    budget = budget if budget is not None and budget >= 0 else mem.config.memory_block_budget_tokens
    now = mem.lifecycle.clock()
    error = ""
    payload: Any = None
    options: dict[str, Any] = {}
    try:
        options = _parse_options(options_text, vendor)
        options.update({"persona": persona or options.get("persona"), "budget_tokens": budget})
        if query.strip():
            options["query"] = query
        payload = mem.payload(memory_id, vendor, **{k: v for k, v in options.items() if v is not None})
    except (ValueError, TypeError) as exc:
        error = str(exc)
    # The block as the payload built it: the same query-time snapshot (stored turns included) and
    # the same turns left out because the payload sends them.
    snapshot = mem.snapshot(memory_id)  # the facts listed below (a cached read)
    block = mem.memory_block(
        memory_id, query or None, budget_tokens=budget, skip_recent_turns=sent_turns(vendor, options)
    )
    shown_options = options_text or json.dumps(DEMO_OPTIONS.get(vendor, {}), ensure_ascii=False, indent=2)
    vendor_select = "".join(
        f'<option value="{esc(v)}"{" selected" if v == vendor else ""}>{esc(v)}: {esc(label)}</option>'
        for v, label in VENDOR_CHOICES.items()
    )
    form = (
        f'<form method="get" action="{esc(memory_url(memory_id, "/inject"))}" class="inject-form">'
        f'<label>vendor <select name="vendor" id="vendor">{vendor_select}</select></label>'
        f'<label>query <input name="query" value="{esc(query)}" '
        'placeholder="what the user just said"></label>'
        f'<label>budget <input name="budget" type="number" min="0" value="{budget}"></label>'
        f'<label class="wide">persona <input name="persona" value="{esc(persona)}"></label>'
        f'<details><summary>vendor options (JSON)</summary><textarea name="options" rows="8" cols="80">'
        f"{esc(shown_options)}</textarea></details>"
        "<button>Preview</button></form>"
    )
    parts = getattr(block, "part_tokens", {}) or {}
    part_rows = [
        f'<tr><td>{esc(name)}</td><td class="num">{tokens}</td></tr>' for name, tokens in parts.items()
    ]
    extra = {k: v for k, v in block.model_dump().items() if k not in _KNOWN_BLOCK_FIELDS}
    if error:
        payload_html = f'<p class="error">{esc(error)}</p>'
    elif isinstance(payload, str):  # the LLMConfig string: shown exactly as it is sent
        payload_html = f'<pre class="json payload">{esc(payload)}</pre>' + _decoded(payload)
    else:
        payload_html = json_block(payload, css="json payload")
        if isinstance(payload, dict) and isinstance(payload.get("LLMConfig"), str):
            payload_html += _decoded(payload["LLMConfig"])
    body = (
        f"<h1>{esc(memory_id)}: inject preview</h1>"
        + memory_tabs(memory_id, "inject")
        + form
        + f'<section id="payload"><h2>Payload: {esc(vendor)}</h2>{payload_html}</section>'
        + '<section id="block"><h2>Memory block</h2>'
        + f'<p class="budget"><strong class="tokens">{block.tokens}</strong> / {budget} tokens '
        f"(CJK-aware count) · language {esc(block.language)}</p>"
        + f'<pre class="block">{esc(block.text) or "(empty)"}</pre>'
        + table(["part", "tokens"], part_rows, css="parts")
        + (f"<h3>More about this block</h3>{json_block(extra)}" if extra else "")
        + "</section>"
        + '<section id="why"><h2>Why each item was chosen or cut</h2>'
        + table(
            ["item", "", "query match", "why"],
            _other_rows(mem, memory_id, block) + _fragment_rows(mem, memory_id, snapshot, block, query, now),
            css="why",
            empty="no active facts",
        )
        + "</section>"
    )
    return layout(f"{memory_id} inject", body, crumbs=[(memory_id, memory_url(memory_id)), ("inject", None)])
