"""A local OpenAI-compatible server that answers and grades LoCoMo-style questions by simple rules.

It exists to RECORD the cassette of ``tests/integration/test_recall_benchmark.py`` (the model path of
``benchmarks/recall.py``). Unlike :class:`~tests.fakes.openai_server.FakeOpenAIServer`, whose replies
are scripted in advance, it derives each reply from the request, because the benchmark's requests
depend on the contexts it builds:

- an answer request (a ``<context>...</context>`` block and a ``Question:`` line in the last user
  message) gets the context line sharing the most word stems with the question, without its
  ``[date] Speaker:`` prefix, or ``I don't know.`` when no line shares one;
- a judge request (``Question:``, ``Gold answer:`` and ``Generated answer:`` lines) gets a one-line
  reason and ``{"label": "CORRECT"}`` when every word of the gold answer occurs in the generated
  answer, else ``{"label": "WRONG"}``.

Like the real API it rejects (HTTP 400, OpenAI error body) a request without ``model``, with
``messages`` that are not a non-empty list of ``{role, content}`` objects of known roles, or with a
``temperature`` outside 0..2; anything else is a 400 too (it is neither kind of request).

Example:
    >>> from tests.fakes.openai_qa_server import answer_line
    >>> answer_line("Where does Maya live?", "[3 March 2024] Maya: I live in Lisbon now.\\nTheo: Cool.")
    'I live in Lisbon now.'
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.openai_server import FakeOpenAIServer, Reply, _error

__all__ = ["FakeQAServer", "answer_line", "judge_label"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an and the of to in on at is are was were do does did what when where who how".split())
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_PREFIX = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?(?:[A-Z][\w ]{0,30}:\s+)?")


def _stems(text: str) -> set[str]:
    # A crude stemmer: the first four letters (moved ~ move, lives ~ live).
    return {w[:4] for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def answer_line(question: str, context: str) -> str:
    """The context line sharing the most word stems with ``question`` (the latest on a tie).

    The line's ``[date] Speaker:`` prefix is neither scored nor returned.
    """
    wanted = _stems(question)
    best, best_score = "", 0
    for line in context.splitlines():
        text = _PREFIX.sub("", line).strip()
        score = len(wanted & _stems(text))
        if score and score >= best_score:
            best, best_score = text, score
    return best or "I don't know."


def judge_label(gold: str, generated: str) -> bool:
    """Whether every word of ``gold`` occurs in ``generated``."""
    gold_words = {w for w in _WORD.findall(gold.lower()) if w not in {"a", "an", "the", "and"}}
    return bool(gold_words) and gold_words <= set(_WORD.findall(generated.lower()))


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"^{name}:[ \t]*(.*)$", text, re.MULTILINE)
    return m[1].strip() if m else None


class FakeQAServer(FakeOpenAIServer):
    """A :class:`FakeOpenAIServer` whose replies are computed from each request (see the module doc)."""

    def __init__(self) -> None:
        super().__init__(responder=_reply)

    def _answer(self, path: str, raw: bytes) -> tuple[int, dict[str, Any], dict[str, str], float]:
        try:
            request = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return 400, _error("request body is not JSON", "invalid_request_error"), {}, 0.0
        problem = _invalid(request)
        if problem is not None:
            with self._lock:
                self.requests.append(request)
            return 400, _error(problem, "invalid_request_error"), {}, 0.0
        return super()._answer(path, raw)


def _invalid(request: Any) -> str | None:
    if not isinstance(request, dict):
        return "body must be a JSON object"
    if not isinstance(request.get("model"), str) or not request["model"]:
        return "you must provide a model parameter"
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            return f"messages[{i}].role: invalid"
        if not isinstance(m.get("content"), str | list):
            return f"messages[{i}].content: expected a string or an array of parts"
    temperature = request.get("temperature")
    if temperature is not None and not (isinstance(temperature, int | float) and 0 <= temperature <= 2):
        return "temperature: must be between 0 and 2"
    last = messages[-1].get("content")
    if not isinstance(last, str) or "Question:" not in last:
        return "fake QA server: not an answer or judge request"
    return None


def _reply(request: dict[str, Any]) -> Reply:
    text = request["messages"][-1]["content"]
    question = _field(text, "Question") or ""
    gold = _field(text, "Gold answer")
    if gold is not None:
        generated = _field(text, "Generated answer") or ""
        ok = judge_label(gold, generated)
        reason = "The generated answer names the gold fact." if ok else "The gold fact is missing."
        return Reply(content=f'{reason} {{"label": "{"CORRECT" if ok else "WRONG"}"}}')
    m = re.search(r"<context>\n?(.*?)\n?</context>", text, re.DOTALL)
    return Reply(content=answer_line(question, m[1] if m else ""))
