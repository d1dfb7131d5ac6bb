"""Model economy of the llm path: model calls and prompt tokens per ingested batch, fully offline.

A counting fake chat model stands in for an OpenAI-compatible model behind ``LLMExtractor`` and
``LLMSummarizer``. It answers in the shape ChatOpenAI's ``with_structured_output`` expects for the
chosen method (a forced tool call for ``function_calling``; JSON content plus
``additional_kwargs["parsed"]`` for ``json_schema``; JSON content for ``json_mode``), derives one
schema-valid fact from every user message that states something about the speaker, and writes a
short summary. It counts calls and prompt tokens (``convmem_graph.tokens.count_tokens`` over the
prompt messages; the tool / response-format schema sent with a structured call is counted apart).

Data:

- LoCoMo (path as the first argument): one memory per conversation, one lifecycle run (batch) per
  session, ``speaker_a`` as the user, the session's date as the time of its first turn.
- DuLeMon samples (``--dulemon``): one memory and one batch per sample session, the segmenter's
  spaces removed, the grounding labels dropped.

``--batch-messages N`` groups whole consecutive sessions of one memory into runs of up to N
messages, to show what a larger batch (the replay command buffers 1,000 messages) costs;
``--per-turn`` runs once per turn without ``session_ended``, as the agent middleware ingests.

Usage:
    python benchmarks/model_economy.py [../shared/data/locomo/locomo10.json]
        [--dulemon ../shared/data/dulemon-samples/samples.json]
        [--method json_schema|function_calling|json_mode] [--batch-messages N | --per-turn]
        [--summary-tokens N] [--skip-dulemon]

Exit status 1 when the target (at most 2 model calls per ingested batch) fails on a dataset.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import re
import statistics
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.output_parsers import PydanticOutputParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field

from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.llm import LLMExtractor, LLMSummarizer
from convmem_graph.runner import Lifecycle, RunResult
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.tokens import count_tokens

__all__ = ["CallTally", "CountingFakeChatModel", "Economy", "main", "run_dataset"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_DULEMON = REPO.parent / "shared" / "data" / "dulemon-samples" / "samples.json"
TARGET_CALLS_PER_BATCH = 2

Method = Literal["json_schema", "function_calling", "json_mode"]
Kind = Literal["extractor", "summarizer"]

# ------------------------------------------------------------------------------------ the fake


class CallTally:
    """What the fake model was asked: calls and prompt tokens by kind (extractor / summarizer)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {"extractor": 0, "summarizer": 0}
        self.prompt_tokens: dict[str, int] = {"extractor": 0, "summarizer": 0}
        # Prompt tokens by part of the prompt, e.g. ("extractor", "known facts").
        self.parts: Counter[tuple[str, str]] = Counter()
        self.schema_tokens = 0  # tool / response_format definitions sent with structured calls
        self.summarizer_shorten_calls = 0
        self.lock = threading.Lock()

    def snapshot(self) -> tuple[int, int, int, int, int]:
        """Return (extractor calls, summarizer calls, extractor tokens, summarizer tokens, schema)."""
        with self.lock:
            return (
                self.calls["extractor"],
                self.calls["summarizer"],
                self.prompt_tokens["extractor"],
                self.prompt_tokens["summarizer"],
                self.schema_tokens,
            )


_CONV_LINE = re.compile(r"^\[(m\d+)\] \S+ \S+ UTC (user|assistant): (.*)$")
_FIRST_PERSON_EN = re.compile(r"\b(I|I'm|I've|I'd|I'll|my|me|mine|myself)\b")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_WORD = re.compile(r"[A-Za-z]{4,}")


def _user_lines(prompt: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    """(local id, text) of the user messages in an extraction request."""
    request = next((m.text for m in prompt if isinstance(m, HumanMessage) and "Conversation:" in m.text), "")
    conversation = request.split("Conversation:", 1)[-1]
    out = []
    for line in conversation.splitlines():
        match = _CONV_LINE.match(line.strip())
        if match and match.group(2) == "user":
            out.append((match.group(1), match.group(3).strip()))
    return out


def _states_something(text: str) -> bool:
    """A user message that tells something about the speaker (first person, not only a question)."""
    if not text or (text.rstrip().endswith(("?", "？")) and not re.search(r"[.!。！]", text)):
        return False
    return bool(_FIRST_PERSON_EN.search(text) or "我" in text)


def _first_clause(text: str, limit: int) -> str:
    """The message's first clause, at most ``limit`` characters: about as long as a real fact."""
    clauses = [c for c in re.split(r"(?<=[.!?。！？，,;；])\s*", text.strip()) if c]
    clause = next(
        (c for c in clauses if _FIRST_PERSON_EN.search(c) or "我" in c), clauses[0] if clauses else text
    )
    return clause[:limit].rstrip(" ,，")


def _fact(local_id: str, text: str) -> dict[str, Any]:
    """One schema-valid ``FactOut`` derived deterministically from a user message."""
    if _CJK.search(text):
        clause = _first_clause(text, 40)
        subject = "".join(_CJK.findall(clause.split("我", 1)[-1]))[:4] or "chat"
        content = f"用户说：{clause}"
    else:
        clause = _first_clause(text, 100)
        words = sorted(_WORD.findall(clause), key=lambda w: (-len(w), w))
        subject = words[0].lower() if words else "chat"
        content = f"User said: {clause}"
    return {
        "content": content,
        "category": "event",
        "key": f"event:{subject}",
        "value": None,
        "polarity": 1,
        "single_valued": False,
        "transient": False,
        "expires_on": None,
        "source_ids": [local_id],
    }


_HEADERS = {
    "Current time:": "header",
    "Known facts about the user:": "known facts",
    "Variables to fill:": "variables",
    "Conversation:": "conversation",
    "Previous summary:": "previous summary",
    "Known profile:": "profile + facts",
    "Known facts:": "profile + facts",
    "New messages:": "conversation",
}


def _prompt_parts(messages: Sequence[BaseMessage]) -> Counter[str]:
    """Tokens of each part of a prompt: instructions (system and notes) and the request's sections."""
    parts: Counter[str] = Counter()
    for m in messages:
        text = m.text
        if not isinstance(m, HumanMessage) or not text.startswith("Current time:"):
            parts["instructions"] += count_tokens(text)
            continue
        section = "header"
        lines: list[str] = []
        for line in text.splitlines():
            head = next((name for prefix, name in _HEADERS.items() if line.startswith(prefix)), None)
            if head is not None and lines:
                parts[section] += count_tokens("\n".join(lines))
                lines = []
            section = head or section
            lines.append(line)
        parts[section] += count_tokens("\n".join(lines))
    return parts


def _summary_text(prompt: Sequence[BaseMessage], tokens: int) -> str:
    """A summary of about ``tokens`` tokens in the conversation's language."""
    text = prompt[-1].text if prompt else ""
    zh = len(_CJK.findall(text)) > len(text) // 10
    sentence = "用户近期聊了生活和工作。" if zh else "The user talked about daily life and work lately. "
    reps = max(1, math.ceil(tokens / max(1, count_tokens(sentence))))
    return (sentence * reps).strip()


class CountingFakeChatModel(BaseChatModel):
    """Offline chat model that counts calls and prompt tokens and answers like ChatOpenAI.

    Structured calls (with ``tools`` or ``response_format`` bound) are the extractor's; plain
    calls are the summarizer's.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tally: CallTally = Field(default_factory=CallTally)
    summary_tokens: int = 60

    @property
    def _llm_type(self) -> str:
        return "counting-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = kwargs.get("tools")
        response_format = kwargs.get("response_format")
        kind: Kind = "extractor" if tools or response_format else "summarizer"
        tokens = sum(count_tokens(m.text) for m in messages)
        schema = tools if tools else response_format if response_format else None
        with self.tally.lock:
            self.tally.calls[kind] += 1
            self.tally.prompt_tokens[kind] += tokens
            for part, n in _prompt_parts(messages).items():
                self.tally.parts[kind, part] += n
            if schema is not None:
                self.tally.schema_tokens += count_tokens(json.dumps(schema, ensure_ascii=False))
        if kind == "summarizer":
            shorten = "the limit is" in messages[-1].text
            if shorten:
                with self.tally.lock:
                    self.tally.summarizer_shorten_calls += 1
                target = re.search(r"in at most (\d+) tokens", messages[-1].text)
                reply = _summary_text(messages, int(target.group(1)) if target else 20)
            else:
                reply = _summary_text(messages, self.summary_tokens)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(reply))])
        facts = [_fact(mid, text) for mid, text in _user_lines(messages) if _states_something(text)]
        args = {"facts": facts, "variables": []}
        if tools:
            name = tools[0]["function"]["name"]
            message = AIMessage("", tool_calls=[{"name": name, "args": args, "id": "call_fake"}])
        elif (response_format or {}).get("type") == "json_schema":
            # ChatOpenAI's json_schema path hands the parsed object over in additional_kwargs.
            message = AIMessage(json.dumps(args, ensure_ascii=False), additional_kwargs={"parsed": args})
        else:
            message = AIMessage(json.dumps(args, ensure_ascii=False))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind OpenAI-format tools (their definitions reach ``_generate`` and are counted)."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def with_structured_output(  # type: ignore[override]
        self,
        schema: type[BaseModel],
        *,
        include_raw: bool = False,
        method: Method = "json_schema",
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, Any]:
        """Mirror ChatOpenAI: a forced tool call, a ``json_schema`` response format, or JSON mode."""
        if method == "function_calling":
            # langchain-core's default is exactly this path (bind_tools + PydanticToolsParser).
            return super().with_structured_output(schema, include_raw=include_raw)
        llm: Runnable[Any, Any]
        parser: Runnable[Any, Any]
        if method == "json_schema":
            response_format = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema.__name__,
                    "description": (schema.__doc__ or "").strip(),
                    "schema": schema.model_json_schema(),
                },
            }
            llm = self.bind(response_format=response_format)
            parser = RunnableLambda(lambda msg: _parse_structured(msg, schema))
        else:
            llm = self.bind(response_format={"type": "json_object"})
            parser = PydanticOutputParser(pydantic_object=schema)
        if not include_raw:
            return llm | parser
        assign = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        fallback = assign.with_fallbacks(
            [RunnablePassthrough.assign(parsed=lambda _: None)], exception_key="parsing_error"
        )
        return RunnableMap(raw=llm) | fallback


def _parse_structured(message: AIMessage, schema: type[BaseModel]) -> BaseModel:
    """What ChatOpenAI's json_schema parser does: ``parsed`` from additional_kwargs, else the JSON."""
    parsed = message.additional_kwargs.get("parsed")
    if parsed is None:
        parsed = json.loads(message.text)
    return parsed if isinstance(parsed, schema) else schema.model_validate(parsed)


# ------------------------------------------------------------------------------------ the data

_DATE = re.compile(r"(\d+):(\d+)\s*(am|pm) on (\d+) (\w+),? (\d{4})", re.I)
_SPACE_CJK = re.compile(r"(?<=[^\x00-\x7f]) +| +(?=[^\x00-\x7f])")

Batch = list[dict[str, Any]]


def _session_ms(text: str) -> int:
    m = _DATE.search(text or "")
    if not m:
        raise ValueError(f"locomo: unparsable session date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    dt = datetime.strptime(f"{day} {month[:3]} {year} {h}:{minute}", "%d %b %Y %H:%M").replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def load_locomo(path: Path) -> Iterator[tuple[str, list[Batch]]]:
    """Yield (memory id, sessions as OpenAI-style messages with ms timestamps) per conversation."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for sample in data:
        conv = sample["conversation"]
        speaker_a = conv["speaker_a"]
        sessions: list[Batch] = []
        n = 1
        while f"session_{n}" in conv or f"session_{n}_date_time" in conv:
            turns = conv.get(f"session_{n}") or []
            if turns:
                base = _session_ms(conv[f"session_{n}_date_time"])
                session = []
                for i, turn in enumerate(turns):
                    text = turn.get("text", "")
                    if turn.get("blip_caption"):
                        text = f"{text} [shares a photo: {turn['blip_caption']}]"
                    role = "user" if turn.get("speaker") == speaker_a else "assistant"
                    session.append({"role": role, "content": text, "timestamp": base + i * 30_000})
                sessions.append(session)
            n += 1
        yield f"locomo_{sample['sample_id']}", sessions


def load_dulemon(path: Path) -> Iterator[tuple[str, list[Batch]]]:
    """Yield (memory id, [the session]) per DuLeMon sample, spaces removed, labels dropped."""
    base = 1_767_268_800_000  # 2026-01-01 12:00 UTC; the samples carry no time
    for k, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        sample = json.loads(line)
        session = []
        for i, utterance in enumerate(sample["conversation"]):
            speaker, _, text = utterance.split("\t", 1)[0].partition(":")
            role = {"Usr": "user", "Bot": "assistant"}.get(speaker.strip())
            if role is None:
                raise ValueError(f"dulemon: line {k + 1} conversation[{i}]: unknown speaker {speaker!r}")
            content = _SPACE_CJK.sub("", text.strip())
            session.append(
                {"role": role, "content": content, "timestamp": base + k * 86_400_000 + i * 30_000}
            )
        yield f"dulemon_{k:02d}", [session]


def split_turns(sessions: list[Batch]) -> list[Batch]:
    """Cut sessions into turns (user messages plus the replies that follow), as the middleware does."""
    out: list[Batch] = []
    for session in sessions:
        for message in session:
            if not out or (message["role"] == "user" and out[-1][-1]["role"] != "user"):
                out.append([])
            out[-1].append(message)
    return out


def group_sessions(sessions: list[Batch], batch_messages: int) -> list[Batch]:
    """Join whole consecutive sessions into batches of at most ``batch_messages`` (0: one each)."""
    if batch_messages <= 0:
        return sessions
    out: list[Batch] = []
    for session in sessions:
        if out and len(out[-1]) + len(session) <= batch_messages:
            out[-1] = out[-1] + session
        else:
            out.append(list(session))
    return out


# ------------------------------------------------------------------------------------ the run


@dataclass
class BatchCost:
    """Model use of one lifecycle run."""

    messages: int
    transcript_tokens: int
    extractor_calls: int
    summarizer_calls: int
    extractor_tokens: int
    summarizer_tokens: int
    schema_tokens: int
    reported_calls: int  # RunResult.model_calls
    position: int  # 0 for a memory's first batch
    last: bool  # a memory's last batch
    known_fact_tokens: int  # extractor prompt tokens spent on the memory's known facts


@dataclass
class Economy:
    """Everything measured on one dataset."""

    name: str
    memories: int = 0
    batches: list[BatchCost] = field(default_factory=list)
    new_messages: int = 0
    shorten_calls: int = 0
    parts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def total(self, attr: str) -> int:
        """Sum of one :class:`BatchCost` attribute over all batches."""
        return sum(int(getattr(b, attr)) for b in self.batches)


def run_dataset(
    name: str,
    memories: Iterator[tuple[str, list[Batch]]],
    *,
    method: Method,
    batch_messages: int,
    per_turn: bool = False,
    summary_tokens: int,
) -> Economy:
    """Run the lifecycle with the counting fake over one dataset; one run per batch."""
    fake = CountingFakeChatModel(summary_tokens=summary_tokens)
    store = MemoryStore.from_url("sqlite://")
    # Per turn, the clock is the turn's own time, as for a live agent: the LLM extractor's turns
    # wait for a batch (MemoryConfig.extract_after_user_messages / extract_idle_seconds).
    clock = [0]
    lifecycle = Lifecycle(
        store,
        config=MemoryConfig(structured_output_method=method),
        extractor=LLMExtractor(fake, method=method),
        summarizer=LLMSummarizer(fake),
        **({"clock": lambda: clock[0]} if per_turn else {}),
    )
    economy = Economy(name)
    try:
        for memory_id, sessions in memories:
            economy.memories += 1
            batches = split_turns(sessions) if per_turn else group_sessions(sessions, batch_messages)
            if per_turn:
                batches.append([])  # the conversation ends: what waits is extracted
            for position, batch in enumerate(batches):
                before = fake.tally.snapshot()
                known_before = fake.tally.parts["extractor", "known facts"]
                if per_turn and batch:
                    clock[0] = max(int(m["timestamp"]) for m in batch) + 1_000
                inputs = [RawInput(batch, source="openai")] if batch else []
                result: RunResult = lifecycle.run(memory_id, inputs, session_ended=not per_turn or not batch)
                after = fake.tally.snapshot()
                d = [a - b for a, b in zip(after, before, strict=True)]
                economy.new_messages += result.new_messages
                economy.batches.append(
                    BatchCost(
                        messages=len(batch),
                        transcript_tokens=sum(count_tokens(m["content"]) for m in batch),
                        extractor_calls=d[0],
                        summarizer_calls=d[1],
                        extractor_tokens=d[2],
                        summarizer_tokens=d[3],
                        schema_tokens=d[4],
                        reported_calls=result.model_calls,
                        position=position,
                        last=position == len(batches) - 1,
                        known_fact_tokens=fake.tally.parts["extractor", "known facts"] - known_before,
                    )
                )
    finally:
        store.close()
    economy.shorten_calls = fake.tally.summarizer_shorten_calls
    economy.parts = Counter(fake.tally.parts)
    return economy


def _per_1k(tokens: int, transcript: int) -> float:
    return 1000.0 * tokens / transcript if transcript else 0.0


def report(e: Economy, out: Callable[[str], None] = print) -> bool:
    """Print the figures of one dataset; return whether the call target holds."""
    n = len(e.batches)
    transcript = e.total("transcript_tokens")
    ext_calls, sum_calls = e.total("extractor_calls"), e.total("summarizer_calls")
    ext_tok, sum_tok, schema_tok = (
        e.total("extractor_tokens"),
        e.total("summarizer_tokens"),
        e.total("schema_tokens"),
    )
    per_batch = [b.extractor_calls + b.summarizer_calls for b in e.batches]
    over = sum(1 for c in per_batch if c > TARGET_CALLS_PER_BATCH)
    holds = n > 0 and max(per_batch) <= TARGET_CALLS_PER_BATCH
    firsts = [b for b in e.batches if b.position == 0]
    lasts = [b for b in e.batches if b.last and b.position > 0]

    def known_per_call(bs: list[BatchCost]) -> float:
        return sum(b.known_fact_tokens for b in bs) / max(1, sum(b.extractor_calls for b in bs))

    out(f"== {e.name}")
    out(
        f"  batches ingested          {n:>8,}  ({e.memories} memories, "
        f"{e.total('messages'):,} messages sent, {e.new_messages:,} stored)"
    )
    out(f"  transcript tokens         {transcript:>8,}  (mean {transcript / max(1, n):,.0f} per batch)")
    out(
        f"  model calls total         {ext_calls + sum_calls:>8,}  "
        f"= extractor {ext_calls:,} + summarizer {sum_calls:,}"
    )
    out(
        f"  calls per batch           {(ext_calls + sum_calls) / max(1, n):>8.2f}  = extractor "
        f"{ext_calls / max(1, n):.2f} + summarizer {sum_calls / max(1, n):.2f}; "
        f"max {max(per_batch, default=0)}, median {statistics.median(per_batch) if per_batch else 0}"
    )
    out(f"  summarizer shorten calls  {e.shorten_calls:>8,}")
    out(
        f"  RunResult.model_calls     {e.total('reported_calls'):>8,}  (what the lifecycle reports; "
        f"the fake counted {ext_calls + sum_calls:,})"
    )
    out(
        f"  prompt tokens / 1k transcript tokens  {_per_1k(ext_tok + sum_tok, transcript):>8,.0f}  "
        f"= extractor {_per_1k(ext_tok, transcript):,.0f} + summarizer {_per_1k(sum_tok, transcript):,.0f}"
    )
    out(
        f"    + schema sent with structured calls {_per_1k(schema_tok, transcript):>8,.0f}  "
        f"({schema_tok / max(1, ext_calls):,.0f} tokens per extractor call)"
    )
    if lasts:
        out(
            f"    known facts in each extractor prompt: {known_per_call(firsts):,.0f} tokens in a memory's "
            f"first batch -> {known_per_call(lasts):,.0f} in its last (up to 200 facts)"
        )
    for kind in ("extractor", "summarizer"):
        shares = sorted(((n, part) for (k, part), n in e.parts.items() if k == kind), reverse=True)
        text = ", ".join(f"{part} {_per_1k(n, transcript):,.0f}" for n, part in shares)
        out(f"    {kind} prompt by part, per 1k: {text}")
    verdict = "HOLDS" if holds else f"FAILS ({over} of {n} batches over)"
    out(f"  target <= {TARGET_CALLS_PER_BATCH} model calls per ingested batch: {verdict}")
    return holds


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit status 1 when the target fails on any dataset."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("locomo", nargs="?", type=Path, default=DEFAULT_LOCOMO, help="locomo10.json")
    parser.add_argument("--dulemon", type=Path, default=DEFAULT_DULEMON, help="DuLeMon samples.json")
    parser.add_argument(
        "--method", choices=["json_schema", "function_calling", "json_mode"], default="json_schema"
    )
    batching_group = parser.add_mutually_exclusive_group()
    batching_group.add_argument(
        "--batch-messages",
        type=int,
        default=0,
        help="join whole sessions into runs of up to N messages (default 0: one run per session)",
    )
    parser.add_argument(
        "--summary-tokens",
        type=int,
        default=60,
        help="length of the fake's summaries (over the 300-token budget triggers the shorten call)",
    )
    batching_group.add_argument(
        "--per-turn",
        action="store_true",
        help="one run per turn without session_ended, as the agent middleware ingests",
    )
    parser.add_argument("--skip-dulemon", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = print
    batching = (
        "per turn"
        if args.per_turn
        else f"up to {args.batch_messages} messages"
        if args.batch_messages
        else "per session"
    )
    out(
        f"model_economy  {datetime.now(UTC):%Y-%m-%d %H:%M UTC}  python {platform.python_version()}  "
        f"{platform.machine()}  method={args.method}  batches={batching}  "
        f"summary_tokens={args.summary_tokens}"
    )
    datasets = [("LoCoMo", load_locomo(args.locomo))]
    if not args.skip_dulemon:
        datasets.append(("DuLeMon samples (zh)", load_dulemon(args.dulemon)))
    ok = True
    for name, memories in datasets:
        economy = run_dataset(
            name,
            memories,
            method=args.method,
            batch_messages=args.batch_messages,
            per_turn=args.per_turn,
            summary_tokens=args.summary_tokens,
        )
        ok = report(economy, out) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
