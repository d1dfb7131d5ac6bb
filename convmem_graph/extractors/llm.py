"""Model-backed extractor and summarizer: any LangChain ``BaseChatModel``, validated structured output.

:class:`LLMExtractor` makes one structured-output call per batch of messages and returns fragment
candidates plus values for the variables the model may infer. The answer is validated twice: by
the pydantic schema (:class:`ExtractionOutput`), then against the batch (every source id must be a
user message of the batch, dates must parse). Invalid answers are retried with the error shown to
the model, up to ``max_invalid_retries`` times, then :class:`~convmem_graph.errors.ExtractionError`
is raised; the caller keeps the batch stored and retries later. Network failures, timeouts and
429s are not caught here: they propagate so the calling LangGraph node's ``RetryPolicy`` retries
them (``RetryPolicy(retry_on=is_retryable)``). With a :class:`~convmem_graph.extractors.pacing.ModelGate`
set as ``gate`` (batch replay sets one), calls are paced and 429s are backed off by the gate, which
raises :class:`~convmem_graph.extractors.pacing.RateLimitedError` when they persist.

:class:`LLMSummarizer` folds the previous summary and new messages into a new one with one call,
asks once more for a shorter text when the answer is over budget, then trims at a sentence
boundary so the budget always holds.

Example:
    >>> from convmem_graph.extractors.chat_models import make_chat_model
    >>> chat = make_chat_model("qwen-plus", base_url="http://127.0.0.1:8000/v1", api_key="EMPTY")
    >>> extractor = LLMExtractor(chat, method="function_calling")
    >>> extractor.name, is_retryable(TimeoutError())
    ('llm', True)
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import httpx
import openai
from langchain_core.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelRefusalError,
    ModelTimeoutError,
    OutputParserException,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from pydantic import BaseModel, Field, ValidationError

from convmem_graph.errors import ExtractionError
from convmem_graph.extractors import prompts
from convmem_graph.models import (
    ExtractionResult,
    Fragment,
    FragmentCandidate,
    Message,
    Summary,
    VariableGuess,
    VariableSpec,
    VariableValue,
    VariableValueType,
)
from convmem_graph.text.keys import normalize_key
from convmem_graph.tokens import TokenCounter

if TYPE_CHECKING:
    from convmem_graph.extractors.pacing import ModelGate

try:  # openai 3.x speaks httpx2; older releases use httpx only.
    import httpx2
except ImportError:  # pragma: no cover - depends on the installed openai
    _HTTPX2_ERRORS: tuple[type[BaseException], ...] = ()
else:
    _HTTPX2_ERRORS = (httpx2.TransportError,)

__all__ = [
    "RETRYABLE_EXCEPTIONS",
    "ExtractionOutput",
    "FactOut",
    "LLMExtractor",
    "LLMSummarizer",
    "VariableOut",
    "is_retryable",
    "trim_to_budget",
]

logger = logging.getLogger(__name__)

#: Exceptions worth retrying at the graph level: rate limits, server errors, timeouts, broken
#: connections. Use with ``RetryPolicy(retry_on=is_retryable)`` (the function also reads the
#: status of other OpenAI status errors and LangChain's ``ModelError.is_retryable``).
RETRYABLE_EXCEPTIONS: tuple[type[BaseException], ...] = (
    ModelRateLimitError,
    ModelAPIError,
    ModelConnectionError,
    ModelTimeoutError,
    openai.APITimeoutError,
    openai.APIConnectionError,
    openai.RateLimitError,
    openai.InternalServerError,
    httpx.TransportError,
    *_HTTPX2_ERRORS,
    TimeoutError,
    ConnectionError,
)

# A malformed or schema-violating answer: the model's fault, worth asking again with the error.
# (ChatOpenAI's json_schema method parses inside the call, so these surface from invoke itself.)
_INVALID_OUTPUT_ERRORS: tuple[type[Exception], ...] = (
    ValidationError,
    OutputParserException,
    json.JSONDecodeError,
    ModelRefusalError,
    openai.LengthFinishReasonError,
    openai.ContentFilterFinishReasonError,
)

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_MAX_KNOWN_FACTS = 200  # newest active fragments shown to the model: bounds the prompt
_MAX_CONTEXT_CHARS = 500  # assistant turns are context only; long replies are cut
_MAX_SUMMARY_FACTS = 60
_DAY_MS = 86_400_000

Category = Literal[
    "preference",
    "allergy",
    "diet",
    "habit",
    "hobby",
    "health",
    "profile",
    "relation",
    "pet",
    "plan",
    "event",
    "state",
    "goal",
    "other",
]


def is_retryable(exc: BaseException) -> bool:
    """Tell whether a failed model call is worth retrying as is (for LangGraph's ``RetryPolicy``).

    True for rate limits (429), server errors (5xx), 408/409, timeouts and connection failures,
    whether raised by the OpenAI SDK, LangChain's provider-neutral ``ModelError`` family, httpx or
    httpx2. False for :class:`~convmem_graph.errors.ExtractionError` (the model kept answering
    badly: retrying the node at once would not help), authentication and bad-request errors.

    Example:
        >>> is_retryable(TimeoutError()), is_retryable(ExtractionError("bad output"))
        (True, False)
    """
    if isinstance(exc, ExtractionError):
        return False
    if isinstance(exc, ModelError):
        return bool(exc.is_retryable)
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500
    return isinstance(exc, RETRYABLE_EXCEPTIONS)


class FactOut(BaseModel):
    """One personal fact about the user, as the model states it."""

    content: str = Field(
        description="The fact as one short third-person sentence in the user's language, "
        "e.g. '用户对芒果过敏' or 'User is allergic to mango'."
    )
    category: Category = Field(description="Kind of fact.")
    key: str = Field(
        description="'<prefix>:<subject>': a prefix of the key scheme, the subject in the user's own "
        "words and language, lower case, spaces as '_', e.g. 'allergy:芒果', 'food:spicy_food', "
        "'profile:city'; reuse the key of a known fact about the same subject."
    )
    value: str | None = Field(description="The slot's value ('芒果', 'Hangzhou'), or null.")
    polarity: Literal[-1, 1] = Field(description="-1 for negative statements (dislikes, avoids), else 1.")
    single_valued: bool = Field(description="True when the subject holds one value at a time (city, job).")
    transient: bool = Field(description="True for a temporary state ('lately', 'this week').")
    expires_on: str | None = Field(
        description="For transient facts, the day (YYYY-MM-DD) the state likely ends; else null."
    )
    source_ids: list[str] = Field(description="Ids of the user messages stating the fact, e.g. ['m2'].")


class VariableOut(BaseModel):
    """A value for one of the profile variables the request lists."""

    name: str = Field(description="Variable name exactly as listed.")
    value: str | int | list[str] | None = Field(description="The value, or null when unknown.")


class ExtractionOutput(BaseModel):
    """Record the personal facts about the user and the profile variable values found in the conversation."""

    facts: list[FactOut] = Field(description="Personal facts; empty when the conversation has none.")
    variables: list[VariableOut] = Field(description="Values of listed variables the conversation tells.")


@dataclass(frozen=True)
class _Batch:
    """One request's prompt plus what is needed to map and check the answer."""

    prompt: list[BaseMessage]
    local_ids: dict[str, str]  # m1 -> real message id (every role)
    user_ids: frozenset[str]  # real ids of user messages
    user_local_ids: tuple[str, ...]
    timestamps: dict[str, int]  # real id -> timestamp_ms
    specs: dict[str, VariableSpec]  # infer=True specs by name


class LLMExtractor:
    """Extracts fragment candidates and variable values with one structured-output call per batch.

    Implements :class:`convmem_graph.extractors.base.Extractor`.

    Args:
        model: Any LangChain chat model supporting ``with_structured_output``.
        method: Structured-output method. ``json_schema`` (strict schema, OpenAI's default) or
            ``function_calling`` (a forced tool call; many local servers handle it better) or
            ``json_mode`` (JSON object mode, the schema is spelled out in the prompt).
        max_invalid_retries: Extra calls allowed after an invalid answer before giving up.
        transient_ttl_days: Expiry of a transient fact the model gave no end date for, counted
            from the message that states it.

    Example:
        >>> from convmem_graph.extractors.chat_models import make_chat_model
        >>> chat = make_chat_model("deepseek-chat", base_url="http://127.0.0.1:8000/v1", api_key="EMPTY")
        >>> LLMExtractor(chat, method="function_calling", max_invalid_retries=1).max_invalid_retries
        1
    """

    name = "llm"
    #: How many of the newest known facts the lifecycle hands over (the prompt shows them all).
    known_facts = _MAX_KNOWN_FACTS
    #: Live turns wait for a larger batch (``MemoryConfig.extract_after_user_messages``): each call
    #: re-sends the instructions and known facts, which dwarf one short turn.
    buffers_turns = True

    def __init__(
        self,
        model: BaseChatModel,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        max_invalid_retries: int = 2,
        transient_ttl_days: int = 7,
    ) -> None:
        if max_invalid_retries < 0:
            raise ValueError(f"max_invalid_retries must be >= 0, got {max_invalid_retries}")
        if transient_ttl_days < 1:
            raise ValueError(f"transient_ttl_days must be >= 1, got {transient_ttl_days}")
        self.model = model
        self.method = method
        self.max_invalid_retries = max_invalid_retries
        self.transient_ttl_days = transient_ttl_days
        self._structured: Runnable[Any, Any] = model.with_structured_output(
            ExtractionOutput, method=method, include_raw=True
        )
        system = prompts.EXTRACTION_SYSTEM_PROMPT
        if method == "json_mode":
            schema = json.dumps(ExtractionOutput.model_json_schema(), ensure_ascii=False)
            system += prompts.EXTRACTION_JSON_MODE_SUFFIX.format(schema=schema)
        self._system = system
        #: Paces this extractor's model calls (concurrency, rpm/tpm, 429 backoff) when set; batch
        #: replay sets it (:class:`convmem_graph.extractors.pacing.ModelGate`).
        self.gate: ModelGate | None = None

    def _invoke(self, prompt: list[BaseMessage]) -> Any:
        if self.gate is None:
            return self._structured.invoke(prompt)
        return self.gate.call(lambda: self._structured.invoke(prompt), prompt)

    async def _ainvoke(self, prompt: list[BaseMessage]) -> Any:
        if self.gate is None:
            return await self._structured.ainvoke(prompt)
        return await self.gate.acall(lambda: self._structured.ainvoke(prompt), prompt)

    def extract(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        *,
        now_ms: int,
    ) -> ExtractionResult:
        """Extract candidates and variable values from one batch with one model call (plus retries).

        Args:
            messages: The batch, both roles, in time order (assistant turns are context only).
            existing: Active fragments of the memory; their keys are offered for reuse.
            specs: Variable specs; those with ``infer=True`` are filled when the batch tells them.
            now_ms: Current time, ms UTC.

        Returns:
            Candidates whose ``source_message_ids`` are user messages of the batch, variable
            guesses (``fragment_ids`` left empty for the caller to fill), and ``model_calls``.

        Raises:
            ExtractionError: The model answered invalidly ``max_invalid_retries + 1`` times.
            Exception: Network errors, timeouts and rate limits propagate unchanged
                (see :func:`is_retryable`).
        """
        batch = self._prepare(messages, existing, specs, now_ms)
        if batch is None:
            return ExtractionResult()
        prompt = batch.prompt
        error = ""
        for attempt in range(1, self.max_invalid_retries + 2):
            try:
                answer = self._invoke(prompt)
            except _INVALID_OUTPUT_ERRORS as exc:
                error = _describe(exc)
            else:
                result, error = self._interpret(answer, batch)
                if result is not None:
                    return result.model_copy(update={"model_calls": attempt})
            prompt = self._after_invalid(batch, attempt, error)
        raise self._give_up(error)

    async def aextract(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        *,
        now_ms: int,
    ) -> ExtractionResult:
        """Async twin of :meth:`extract`."""
        batch = self._prepare(messages, existing, specs, now_ms)
        if batch is None:
            return ExtractionResult()
        prompt = batch.prompt
        error = ""
        for attempt in range(1, self.max_invalid_retries + 2):
            try:
                answer = await self._ainvoke(prompt)
            except _INVALID_OUTPUT_ERRORS as exc:
                error = _describe(exc)
            else:
                result, error = self._interpret(answer, batch)
                if result is not None:
                    return result.model_copy(update={"model_calls": attempt})
            prompt = self._after_invalid(batch, attempt, error)
        raise self._give_up(error)

    def _prepare(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        now_ms: int,
    ) -> _Batch | None:
        if not any(m.role == "user" and m.content.strip() for m in messages):
            return None  # nothing a fact could come from: no model call
        local_ids: dict[str, str] = {}
        conversation: list[tuple[str, int, str, str]] = []
        for m in messages:
            if not m.content.strip():
                continue
            local = f"m{len(local_ids) + 1}"
            local_ids[local] = m.id
            text = m.content if m.role == "user" else _cut(m.content, _MAX_CONTEXT_CHARS)
            conversation.append((local, m.timestamp_ms, m.role, text))
        by_id = {m.id: m for m in messages}
        user_local = tuple(k for k, v in local_ids.items() if by_id[v].role == "user")
        active = [f for f in existing if f.status == "active"]
        active = sorted(active, key=lambda f: f.updated_at, reverse=True)[:_MAX_KNOWN_FACTS]
        known = [(f"f{i}", f.key, f.content) for i, f in enumerate(active, 1)]
        inferable = {s.name: s for s in specs if s.infer}
        variables = [(s.name, s.type, s.description, s.allowed_values) for s in inferable.values()]
        human = prompts.render_extraction_request(
            now_ms=now_ms, known=known, variables=variables, conversation=conversation
        )
        return _Batch(
            prompt=[SystemMessage(self._system), HumanMessage(human)],
            local_ids=local_ids,
            user_ids=frozenset(local_ids[k] for k in user_local),
            user_local_ids=user_local,
            timestamps={m.id: m.timestamp_ms for m in messages},
            specs=inferable,
        )

    def _interpret(self, answer: Any, batch: _Batch) -> tuple[ExtractionResult | None, str]:
        """Validate one answer; return (result, "") or (None, what is wrong)."""
        output, error = _parsed_output(answer)
        if output is None:
            return None, error
        problems: list[str] = []
        candidates: list[FragmentCandidate] = []
        for i, fact in enumerate(output.facts):
            candidate = self._candidate(fact, batch, f"facts[{i}]", problems)
            if candidate is not None:
                candidates.append(candidate)
        if problems:
            return None, "; ".join(problems[:8])
        variables: dict[str, VariableGuess] = {}
        for item in output.variables:
            spec = batch.specs.get(item.name)
            value = _coerce_variable(spec, item.value) if spec is not None else None
            if value is None:
                # A wrong guess for one profile field is not worth another call: skip it.
                logger.debug("llm extractor: ignoring variable %r (unknown, empty or not allowed)", item.name)
                continue
            variables[item.name] = VariableGuess(value=value)
        return ExtractionResult(candidates=candidates, variables=variables), ""

    def _candidate(
        self, fact: FactOut, batch: _Batch, where: str, problems: list[str]
    ) -> FragmentCandidate | None:
        """Map one fact to a candidate, or append what is wrong with it to ``problems``."""
        found: list[str] = []
        sources: list[str] = []
        for sid in fact.source_ids:
            real = batch.local_ids.get(sid.strip(), sid.strip())
            if real not in batch.user_ids:
                found.append(f"{where}.source_ids: {sid!r} is not a user message of this conversation")
            elif real not in sources:
                sources.append(real)
        if not fact.source_ids:
            found.append(f"{where}.source_ids: empty (name the user messages stating the fact)")
        key = _normalize_key(fact.key, fact.category)
        if not key:
            found.append(f"{where}.key: empty")
        expires_at: int | None = None
        if fact.transient:
            if fact.expires_on:
                try:
                    expires_at = _end_of_day_ms(fact.expires_on)
                except ValueError:
                    found.append(f"{where}.expires_on: {fact.expires_on!r} is not a YYYY-MM-DD date")
            elif sources:
                said = max(batch.timestamps[s] for s in sources)
                expires_at = said + self.transient_ttl_days * _DAY_MS
        candidate: FragmentCandidate | None = None
        try:
            candidate = FragmentCandidate(
                content=fact.content.strip(),
                category=fact.category,
                key=key or "-",
                value=fact.value.strip() if fact.value and fact.value.strip() else None,
                polarity=fact.polarity,
                single_valued=fact.single_valued,
                transient=fact.transient,
                expires_at=expires_at,
                source_message_ids=sources,
            )
        except ValidationError as exc:
            found.append(f"{where}: {_describe(exc)}")
        problems.extend(found)
        return None if found else candidate

    def _after_invalid(self, batch: _Batch, attempt: int, error: str) -> list[BaseMessage]:
        logger.warning(
            "llm extractor: invalid answer (attempt %d of %d): %s",
            attempt,
            self.max_invalid_retries + 1,
            error,
        )
        note = prompts.EXTRACTION_RETRY_PROMPT.format(error=error, user_ids=", ".join(batch.user_local_ids))
        return [*batch.prompt, HumanMessage(note)]

    def _give_up(self, error: str) -> ExtractionError:
        calls = self.max_invalid_retries + 1
        return ExtractionError(
            f"llm extractor: no valid answer after {calls} model calls; last error: {error}"
        )


class LLMSummarizer:
    """Folds the previous summary and new messages into a new summary with one model call.

    Implements :class:`convmem_graph.extractors.base.Summarizer`. An answer over budget is trimmed
    at a sentence boundary, so the returned text never exceeds ``budget_tokens`` by ``counter``;
    with ``shorten=True`` the model is first asked once to shorten it (one more call).

    Args:
        model: Any LangChain chat model.
        shorten: Ask the model to shorten an over-budget answer before trimming. Off by default so
            a lifecycle run costs at most one summary call.
    """

    name = "llm"
    #: The summarize node feeds this summarizer every new message (the extractive one needs none).
    uses_messages = True

    def __init__(self, model: BaseChatModel, *, shorten: bool = False) -> None:
        self.model = model
        self.shorten = shorten
        #: Model calls made so far (the summarize node reports the calls of each run).
        self.calls = 0
        #: Paces the model calls when set (see :class:`convmem_graph.extractors.pacing.ModelGate`).
        self.gate: ModelGate | None = None

    def _invoke(self, prompt: list[BaseMessage]) -> BaseMessage:
        if self.gate is None:
            return self.model.invoke(prompt)
        return self.gate.call(lambda: self.model.invoke(prompt), prompt)

    async def _ainvoke(self, prompt: list[BaseMessage]) -> BaseMessage:
        if self.gate is None:
            return await self.model.ainvoke(prompt)
        return await self.gate.acall(lambda: self.model.ainvoke(prompt), prompt)

    def summarize(
        self,
        previous: Summary | None,
        messages: Sequence[Message],
        variables: Mapping[str, VariableValue],
        fragments: Sequence[Fragment],
        *,
        budget_tokens: int,
        counter: TokenCounter,
        now_ms: int,
    ) -> str:
        """Return the new summary text, at most ``budget_tokens`` by ``counter``.

        Args:
            previous: The current summary, if any.
            messages: New messages since it, in time order.
            variables: Current variable values (context).
            fragments: Active fragments (context).
            budget_tokens: Hard limit on the result.
            counter: Token counter, usually :func:`convmem_graph.tokens.count_tokens`.
            now_ms: Current time, ms UTC.

        Returns:
            The summary; the previous one (trimmed) when the model answers with nothing.
        """
        prompt = self._prompt(previous, messages, variables, fragments, budget_tokens, now_ms)
        text = _clean(self._invoke(prompt))
        self.calls += 1
        if self.shorten and text and counter(text) > budget_tokens:
            shorter = _clean(self._invoke(self._shorten_prompt(text, budget_tokens, counter)))
            self.calls += 1
            if shorter and counter(shorter) < counter(text):
                text = shorter
        return self._finish(text, previous, budget_tokens, counter)

    async def asummarize(
        self,
        previous: Summary | None,
        messages: Sequence[Message],
        variables: Mapping[str, VariableValue],
        fragments: Sequence[Fragment],
        *,
        budget_tokens: int,
        counter: TokenCounter,
        now_ms: int,
    ) -> str:
        """Async twin of :meth:`summarize`."""
        prompt = self._prompt(previous, messages, variables, fragments, budget_tokens, now_ms)
        text = _clean(await self._ainvoke(prompt))
        self.calls += 1
        if self.shorten and text and counter(text) > budget_tokens:
            shorter = _clean(await self._ainvoke(self._shorten_prompt(text, budget_tokens, counter)))
            self.calls += 1
            if shorter and counter(shorter) < counter(text):
                text = shorter
        return self._finish(text, previous, budget_tokens, counter)

    def _prompt(
        self,
        previous: Summary | None,
        messages: Sequence[Message],
        variables: Mapping[str, VariableValue],
        fragments: Sequence[Fragment],
        budget_tokens: int,
        now_ms: int,
    ) -> list[BaseMessage]:
        system = prompts.SUMMARY_SYSTEM_PROMPT.format(budget=budget_tokens, words=_words(budget_tokens))
        strongest = sorted(
            (f for f in fragments if f.status == "active"),
            key=lambda f: (f.confidence, f.updated_at),
            reverse=True,
        )[:_MAX_SUMMARY_FACTS]
        human = prompts.render_summary_request(
            now_ms=now_ms,
            previous=previous.text if previous else None,
            variables={name: _value_text(v.value) for name, v in variables.items()},
            facts=[f.content for f in strongest],
            conversation=[
                (
                    m.timestamp_ms,
                    m.role,
                    m.content if m.role == "user" else _cut(m.content, _MAX_CONTEXT_CHARS),
                )
                for m in messages
                if m.content.strip()
            ],
        )
        return [SystemMessage(system), HumanMessage(human)]

    def _shorten_prompt(self, text: str, budget_tokens: int, counter: TokenCounter) -> list[BaseMessage]:
        target = max(1, budget_tokens * 4 // 5)  # aim under the limit: models overshoot
        note = prompts.SUMMARY_SHORTEN_PROMPT.format(
            tokens=counter(text), budget=budget_tokens, target=target, words=_words(target), summary=text
        )
        system = prompts.SUMMARY_SYSTEM_PROMPT.format(budget=budget_tokens, words=_words(budget_tokens))
        return [SystemMessage(system), HumanMessage(note)]

    @staticmethod
    def _finish(text: str, previous: Summary | None, budget_tokens: int, counter: TokenCounter) -> str:
        if not text:
            # An empty answer must not wipe what was known.
            text = previous.text if previous else ""
        return trim_to_budget(text, budget_tokens, counter)


_SENTENCE_END = re.compile(r"[。！？!?；;…\n]+|\.(?=\s|$)")


def trim_to_budget(text: str, budget_tokens: int, counter: TokenCounter) -> str:
    """Cut ``text`` to at most ``budget_tokens``, at the last sentence boundary that fits.

    When not even the first sentence fits, the longest fitting prefix is kept.

    Example:
        >>> from convmem_graph.tokens import count_tokens
        >>> trim_to_budget("用户住在杭州。用户是产品经理。", 8, count_tokens)
        '用户住在杭州。'
    """
    text = text.strip()
    if budget_tokens <= 0:
        return ""
    if counter(text) <= budget_tokens:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    best = ""
    for end in ends:
        piece = text[:end].rstrip()
        if counter(piece) > budget_tokens:
            break
        best = piece
    if best:
        return best
    lo, hi = 0, len(text)
    while lo < hi:  # longest prefix within budget (counters grow with length)
        mid = (lo + hi + 1) // 2
        if counter(text[:mid]) <= budget_tokens:
            lo = mid
        else:
            hi = mid - 1
    out = text[:lo].rstrip()
    while out and counter(out) > budget_tokens:
        out = out[:-1]
    return out


def _parsed_output(answer: Any) -> tuple[ExtractionOutput | None, str]:
    """Read ``with_structured_output(..., include_raw=True)``'s dict into the schema or an error."""
    if not isinstance(answer, Mapping):
        return _validate_output(answer)
    error = answer.get("parsing_error")
    if error is not None:
        return None, _describe(error)
    parsed = answer.get("parsed")
    if parsed is None:
        raw = answer.get("raw")
        invalid = getattr(raw, "invalid_tool_calls", None) or []
        if invalid:
            return None, f"tool call arguments are not valid JSON: {invalid[0].get('error') or ''}"[:400]
        return None, "no structured answer (call the tool / answer with the JSON object)"
    return _validate_output(parsed)


def _validate_output(parsed: Any) -> tuple[ExtractionOutput | None, str]:
    if isinstance(parsed, ExtractionOutput):
        return parsed, ""
    try:
        data = parsed.model_dump() if isinstance(parsed, BaseModel) else parsed
        return ExtractionOutput.model_validate(data), ""
    except ValidationError as exc:
        return None, _describe(exc)


def _describe(exc: BaseException) -> str:
    """Say what was wrong without echoing the user's text (errors end up in logs)."""
    cause = _root_cause(exc)
    if cause is not exc:
        return _describe(cause)
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e['loc']) or '$'}: {e['msg']}"
            for e in exc.errors(include_input=False, include_url=False)
        ]
        return f"{exc.title}: " + "; ".join(parts[:8])
    text = str(exc).split("\n", 1)[0]
    return f"{type(exc).__name__}: {text}"[:400]


def _root_cause(exc: BaseException) -> BaseException:
    # Parser exceptions quote the whole answer; the validation or JSON error under them says what
    # is wrong without repeating the user's facts.
    seen = exc
    while isinstance(seen, OutputParserException) and seen.__cause__ is not None:
        seen = seen.__cause__
    return seen if isinstance(seen, ValidationError | json.JSONDecodeError) else exc


def _normalize_key(key: str, category: str) -> str:
    # The shared spelling (keys.normalize_key); legacy prefixes are mapped only when compared.
    return normalize_key(key, category)


def _end_of_day_ms(day: str) -> int:
    start = datetime.strptime(day.strip(), "%Y-%m-%d").replace(tzinfo=UTC)
    return int((start + timedelta(days=1)).timestamp() * 1000) - 1


def _coerce_variable(spec: VariableSpec, value: str | int | list[str] | None) -> VariableValueType | None:
    """Fit a model's value to the spec's type and allowed values; ``None`` when it cannot."""
    if value is None:
        return None
    allowed = {a.casefold(): a for a in spec.allowed_values or []}
    if spec.type == "integer":
        if isinstance(value, int):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return int(value)
        return None
    if spec.type == "list":
        items = [value] if isinstance(value, str | int) else value
        out = [str(i).strip() for i in items if str(i).strip()]
        if allowed:
            out = [allowed[i.casefold()] for i in out if i.casefold() in allowed]
        return out or None
    text = ", ".join(value) if isinstance(value, list) else str(value)
    text = text.strip()
    if allowed:
        return allowed.get(text.casefold())
    return text or None


def _clean(message: BaseMessage) -> str:
    text = message.text if isinstance(message, AIMessage) else str(message.content)
    text = re.sub(r"<think>.*?</think>", "", str(text), flags=re.DOTALL)  # reasoning models
    return text.strip()


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _words(tokens: int) -> int:
    return max(1, tokens * 7 // 10)


def _value_text(value: VariableValueType) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value)
