"""The optional model path: answer each question from a context, then grade the answer (LoCoMo "J").

The protocol is the one Mem0 and Zep report on LoCoMo (categories 1-4): a chat model answers the
question from the context alone in a short phrase; a judge model (the same one unless another is
named) compares the answer with the gold answer, generously (same fact or same date in another
form is right), and ends with ``{"label": "CORRECT"}`` or ``{"label": "WRONG"}``. J is the share of
answers labelled CORRECT. Calls go through ``langchain_openai.ChatOpenAI`` (OpenAI-compatible
servers: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``), one at a time and in a fixed order.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import Runnable

__all__ = [
    "ANSWER_SYSTEM",
    "JUDGE_SYSTEM",
    "Grade",
    "Judge",
    "answer_messages",
    "judge_messages",
    "parse_label",
]

logger = logging.getLogger(__name__)

ANSWER_SYSTEM = (
    "You answer questions about a long conversation between two people, using only the memory "
    "context you are given. Lines may start with the date they were said, in brackets: resolve "
    "relative times such as 'yesterday' or 'last week' against that date. Answer with a short "
    "phrase (at most about ten words), no explanation. If the context does not hold the answer, "
    "give your best guess."
)

JUDGE_SYSTEM = (
    "Your task is to label an answer to a question as CORRECT or WRONG. You are given a question "
    "(asked about a conversation between two people), a gold (ground truth) answer, and a generated "
    "answer. The gold answer is usually short; the generated answer may be longer. Be generous: if "
    "the generated answer names the same fact, thing or person as the gold answer, it is CORRECT. "
    "For a question about time, a generated answer that refers to the same date or period as the "
    "gold answer is CORRECT even in another format (for example '7 May' and 'May 7th'). First give "
    "a one-sentence reason, then end with the label as JSON, exactly one of "
    '{"label": "CORRECT"} or {"label": "WRONG"}. Never write both labels.'
)

_LABEL_JSON = re.compile(r"\{[^{}]*\"label\"\s*:\s*\"(CORRECT|WRONG)\"[^{}]*\}", re.IGNORECASE)
_LABEL_WORD = re.compile(r"\b(CORRECT|WRONG)\b")


def answer_messages(question: str, context: str) -> list[Any]:
    """The messages asking the model ``question`` over ``context``."""
    user = f"<context>\n{context}\n</context>\n\nQuestion: {question}\nAnswer:"
    return [SystemMessage(ANSWER_SYSTEM), HumanMessage(user)]


def judge_messages(question: str, gold: str, answer: str) -> list[Any]:
    """The messages asking the judge to label ``answer`` against ``gold``."""
    user = f"Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}"
    return [SystemMessage(JUDGE_SYSTEM), HumanMessage(user)]


def parse_label(text: str) -> bool | None:
    """``True`` for CORRECT, ``False`` for WRONG, ``None`` when the reply holds no single label.

    The JSON label wins; otherwise exactly one of the two words must appear (upper case).

    Example:
        >>> parse_label('Same city. {"label": "CORRECT"}'), parse_label("WRONG"), parse_label("maybe")
        (True, False, None)
    """
    found: list[str] = _LABEL_JSON.findall(text)
    if found:
        return found[-1].upper() == "CORRECT"
    words: set[str] = set(_LABEL_WORD.findall(text))
    if len(words) == 1:
        return words.pop() == "CORRECT"
    return None


def _text(reply: Any) -> str:
    content = getattr(reply, "content", reply)
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


@dataclass(frozen=True)
class Grade:
    """The model's answer and the judge's verdict (``None`` when the judge gave no label)."""

    answer: str
    correct: bool | None


class Judge:
    """Ask a model each question with a context, and grade its answer with a judge model.

    Args:
        answerer: The chat model that answers.
        judge: The chat model that grades; defaults to ``answerer``.
        temperature: Sent with every call; ``None`` sends none (models that reject it).
    """

    def __init__(
        self, answerer: BaseChatModel, judge: BaseChatModel | None = None, *, temperature: float | None = 0.0
    ) -> None:
        options: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
        self._answerer: Runnable[Any, Any] = answerer.bind(**options) if options else answerer
        judge = judge or answerer
        self._judge: Runnable[Any, Any] = judge.bind(**options) if options else judge
        self.unlabelled = 0

    def grade(self, question: str, gold: str, context: str) -> Grade:
        """Answer ``question`` from ``context`` and grade the answer against ``gold``."""
        answer = _text(self._answerer.invoke(answer_messages(question, context))).strip()
        reply = _text(self._judge.invoke(judge_messages(question, gold, answer)))
        label = parse_label(reply)
        if label is None:
            self.unlabelled += 1
            logger.warning("judge gave no single CORRECT/WRONG label: %s", json.dumps(reply[:200]))
        return Grade(answer, label)
