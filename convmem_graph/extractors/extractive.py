"""The summary without a model: variables and the strongest fragments, within a token budget.

The text is built only from stored facts (variables and fragment contents), never from transcript
lines, so it cannot leak what the assistant said or repeat a user's instructions verbatim. It is
rebuilt from the current facts each time (the facts already accumulate everything the previous
summary knew), in the user's language, and always fits the budget: pieces are added strongest
first and a piece that would overflow is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from convmem_graph.models import Fragment, Message, Summary, VariableValue
from convmem_graph.text.scripts import is_cjk_text
from convmem_graph.tokens import TokenCounter

__all__ = ["ExtractiveSummarizer"]

_LABELS_ZH = {
    "name": "姓名",
    "birth_year": "出生年份",
    "city": "城市",
    "occupation": "职业",
    "diet": "饮食",
    "hobbies": "爱好",
    "language": "语言",
}
_LABELS_EN = {
    "name": "Name",
    "birth_year": "Birth year",
    "city": "City",
    "occupation": "Occupation",
    "diet": "Diet",
    "hobbies": "Hobbies",
    "language": "Language",
}
#: Variables that say nothing a summary needs (it is already written in the user's language).
_NOT_SUMMARIZED = frozenset({"language"})
#: Stop trying smaller pieces after this many in a row did not fit (the rest cannot either, mostly).
_MAX_MISSES = 64


class ExtractiveSummarizer:
    """Summarizer that needs no model: a profile line, durable facts, then current temporary ones.

    Ranking: manual variables before inferred ones; fragments by confidence, then recency, durable
    before temporary; expired temporary facts and fragments restating a known variable are left
    out. The language is Chinese when most of the user's recent messages are Chinese (without
    messages: the ``language`` variable, else the fragments).

    Example:
        >>> from convmem_graph.tokens import count_tokens
        >>> f = Fragment(id="f1", memory_id="m", content="用户对芒果过敏。", key="allergy:芒果")
        >>> s = ExtractiveSummarizer()
        >>> s.summarize(None, [], {}, [f], budget_tokens=50, counter=count_tokens, now_ms=0)
        '已知事实：用户对芒果过敏。'
    """

    name = "extractive"
    #: Only the newest messages matter (for the language); the summarize node reads no backlog.
    uses_messages = False

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
        """Build the summary text.

        Args:
            previous: The previous summary (not needed: the facts it was built from are still
                stored).
            messages: New messages; only the user's are looked at, for the language.
            variables: Current variable values.
            fragments: Fragments of the memory; only active ones count.
            budget_tokens: Maximum size of the result as counted by ``counter``.
            counter: Token counter.
            now_ms: Current time (temporary facts expired by then are left out).

        Returns:
            The summary, with ``counter(text) <= budget_tokens`` (possibly empty).
        """
        if budget_tokens <= 0:
            return ""
        zh = _is_zh(messages, variables, fragments)
        sections = _Sections(zh, budget_tokens, counter)
        for label, value in _variable_lines(variables, zh):
            sections.try_add(0, f"{label}{'：' if zh else ': '}{value}")
        known_keys = {f"profile:{name}" for name in variables}
        durable, current = _ranked(fragments, known_keys, now_ms)
        for section, items in ((1, durable), (2, current)):
            misses = 0
            for f in items:
                if sections.try_add(section, _sentence(f.content)):
                    misses = 0
                else:
                    misses += 1
                    if misses >= _MAX_MISSES:
                        break
        return sections.fit()


class _Sections:
    """Three sections (profile, facts, current) assembled into one text.

    Pieces are admitted on an additive estimate (piece + separator costs), which is linear in the
    number of pieces; :meth:`fit` then checks the real count of the whole text and drops the
    last-admitted pieces until it fits, so the budget holds for any counter.
    """

    def __init__(self, zh: bool, budget: int, counter: TokenCounter) -> None:
        self.zh = zh
        self.budget = budget
        self.counter = counter
        self.items: tuple[list[str], list[str], list[str]] = ([], [], [])
        self.order: list[int] = []
        self.seen: set[str] = set()
        self.estimate = 0
        self.heads = ("用户画像：", "已知事实：", "近期：") if zh else ("Profile: ", "Facts: ", "Currently: ")
        self.seps = ("；", "", "") if zh else ("; ", " ", " ")

    def render(self) -> str:
        lines = [
            h + s.join(p + " " if self.zh and p[-1:] in ".!?" else p for p in part).rstrip()
            for h, s, part in zip(self.heads, self.seps, self.items, strict=True)
            if part
        ]
        if self.items[0]:
            lines[0] += "。" if self.zh else "."
        return "\n".join(lines)

    def try_add(self, section: int, piece: str) -> bool:
        if not piece or piece in self.seen:
            return True
        part = self.items[section]
        overhead = self.seps[section] if part else self.heads[section] + "\n"
        cost = self.counter(overhead + piece) + (1 if section == 0 and not part else 0)
        if self.estimate + cost > self.budget:
            return False
        part.append(piece)
        self.order.append(section)
        self.seen.add(piece)
        self.estimate += cost
        return True

    def fit(self) -> str:
        text = self.render()
        while self.order and self.counter(text) > self.budget:
            self.items[self.order.pop()].pop()
            text = self.render()
        return text if self.counter(text) <= self.budget else ""


def _is_zh(
    messages: Sequence[Message], variables: Mapping[str, VariableValue], fragments: Sequence[Fragment]
) -> bool:
    """The user's language: their messages, else the ``language`` variable, else the fragments."""
    texts = [m.content for m in messages if m.role == "user" and m.content.strip()]
    language = variables.get("language")
    if not texts and language is not None and str(language.value).lower() in ("zh", "en"):
        return str(language.value).lower() == "zh"
    if not texts:
        texts = [f.content for f in fragments if f.status == "active"]
    zh = sum(1 for t in texts if is_cjk_text(t))
    return zh * 2 >= len(texts) if texts else False


def _variable_lines(variables: Mapping[str, VariableValue], zh: bool) -> list[tuple[str, str]]:
    labels = _LABELS_ZH if zh else _LABELS_EN
    order = {name: i for i, name in enumerate(_LABELS_EN)}
    ordered = sorted(
        variables.values(), key=lambda v: (v.origin != "manual", order.get(v.name, len(order)), v.name)
    )
    lines: list[tuple[str, str]] = []
    for v in ordered:
        if v.name in _NOT_SUMMARIZED:
            continue
        if isinstance(v.value, list):
            if not v.value:
                continue
            value = ("、" if zh else ", ").join(str(x) for x in v.value)
        else:
            value = str(v.value).strip()
            if not value:
                continue
        lines.append((labels.get(v.name, v.name), value))
    return lines


def _ranked(
    fragments: Sequence[Fragment], known_keys: set[str], now_ms: int
) -> tuple[list[Fragment], list[Fragment]]:
    durable: list[Fragment] = []
    current: list[Fragment] = []
    for f in fragments:
        if f.status != "active" or f.key in known_keys:
            continue
        if f.transient:
            if f.expires_at is not None and f.expires_at <= now_ms:
                continue
            current.append(f)
        else:
            durable.append(f)

    def rank(f: Fragment) -> tuple[float, int, int, str]:
        return (-f.confidence, -f.observed_at, -max(f.updated_at, f.created_at), f.id)

    durable.sort(key=rank)
    current.sort(key=rank)
    return durable, current


def _sentence(content: str) -> str:
    text = " ".join(content.split())
    if not text:
        return ""
    if text[-1] in "。.!！?？":
        return text
    return text + ("。" if is_cjk_text(text) else ".")
