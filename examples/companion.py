"""An AI companion that remembers its user across text chat and voice calls.

What it shows:

1. ``ConvMemory.open`` on a SQLite file (the offline heuristic extractor, no model, no key).
2. Ingesting the user's Tencent IM history (a two-page ``admin_getroammsg`` export with chatbot
   replies) and one TRTC AI-conversation voice call (callback deliveries; the bot is recognised by
   ``MemoryConfig(bot_ids=["ai_xiaoyu_bot"])``); the call is ingested with ``session_ended=True``
   so the rolling summary is refreshed when the call hangs up.
3. What the memory now holds: profile variables, fragments (third-person facts) and the summary.
4. The payloads that start the next voice call with that memory: the TRTC ``StartAIConversation``
   request body (``LLMConfig`` is a JSON *string*, as TRTC expects; it is also printed decoded) and
   the Agora ConvoAI join body. Vendor options come from ``examples/options/``; keys starting
   with ``_`` are comments there and are dropped.

Run it from the repository root (no network, no API key)::

    python examples/companion.py                 # a temporary database, deleted at exit
    python examples/companion.py /tmp/companion.db   # keep the database to inspect it later

Then, with a kept database: ``convmem show u_10086 --db /tmp/companion.db``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory

EXAMPLES = Path(__file__).resolve().parent
MEMORY_ID = "u_10086"
BOT_ID = "ai_xiaoyu_bot"
PERSONA = "你是「小雨」，一个温柔的 AI 陪伴伙伴。说话简短、自然，记得用户告诉过你的事。"


def load_json(path: Path) -> Any:
    """Read a UTF-8 JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


def load_options(name: str) -> dict[str, Any]:
    """Read a vendor options file, dropping comment keys (those starting with ``_``)."""
    options = load_json(EXAMPLES / "options" / name)
    return {key: value for key, value in options.items() if not key.startswith("_")}


def dumps(value: Any) -> str:
    """Pretty JSON that keeps Chinese readable."""
    return json.dumps(value, ensure_ascii=False, indent=2)


def section(title: str) -> None:
    """Print a section header."""
    print(f"\n=== {title} ===")


def run(db_path: str) -> None:
    """Build the memory in ``db_path`` and print it and the call-start payloads."""
    conversations = EXAMPLES / "conversations"
    with ConvMemory.open(db_path, config=MemoryConfig(bot_ids=[BOT_ID])) as mem:
        section("ingest")
        im = mem.ingest(MEMORY_ID, load_json(conversations / "u_10086_im_history.json"))
        print(
            f"IM history: {im.new_messages} new messages, fragment ops {im.fragment_ops}, "
            f"skipped {im.skipped}"
        )
        call = mem.ingest(MEMORY_ID, load_json(conversations / "u_10086_trtc_call.json"), session_ended=True)
        print(
            f"TRTC call:  {call.new_messages} new messages, fragment ops {call.fragment_ops}, "
            f"skipped {call.skipped}, summary version {call.summary_version}"
        )
        # Expired temporary facts are never stored: the call is dated 2026-01-01, so its
        # "next week" trip and "lately" stomach trouble are past; its turns still reach the payload.
        print("(temporary facts whose time has passed are not stored; recent turns still are)")

        section(f"memory {MEMORY_ID}: variables")
        for name, var in mem.variables(MEMORY_ID).items():
            print(f"{name}: {json.dumps(var.value, ensure_ascii=False)} ({var.origin})")
        section(f"memory {MEMORY_ID}: fragments")
        for fragment in mem.fragments(MEMORY_ID):
            note = " [temporary]" if fragment.transient else ""
            print(f"- [{fragment.category}] {fragment.content}{note}")
        summary = mem.summary(MEMORY_ID)
        section(f"memory {MEMORY_ID}: summary")
        print(summary.text if summary else "(none yet)")

        trtc = mem.payload(MEMORY_ID, "trtc", persona=PERSONA, **load_options("trtc.json"))
        section("TRTC StartAIConversation body (send as is)")
        print(dumps(trtc))
        section("TRTC LLMConfig, decoded for reading")
        print(dumps(json.loads(trtc["LLMConfig"])))

        agora = mem.payload(MEMORY_ID, "agora", persona=PERSONA, **load_options("agora.json"))
        section("Agora ConvoAI join body")
        print(dumps(agora))


def main() -> None:
    """Run on ``argv[1]`` as the SQLite file, or on a temporary one."""
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    with tempfile.TemporaryDirectory(prefix="convmem-companion-") as tmp:
        run(str(Path(tmp) / "companion.db"))


if __name__ == "__main__":
    main()
