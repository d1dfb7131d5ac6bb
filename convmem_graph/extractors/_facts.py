"""Internal fact record and per-message context shared by the zh and en rule sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.scripts import has_cjk, norm_key
from convmem_graph.text.timeexpr import Period, period_end_ms

__all__ = ["DAY_MS", "Fact", "PlanInfo", "RuleContext", "plan_action_from_content"]

DAY_MS = 86_400_000
#: A plan stays in memory one day after its last day, so "how was the trip?" still works.
PLAN_GRACE_DAYS = 1


_TRAVEL_TOPICS = frozenset(
    "trip travel journey flight vacation holiday visit 出差 旅行 旅游 行程 航班".split()
)
_TRAVEL_ACTION = lazy_compile(
    r"^(?:go|fly|travel|drive|visit|head|return|go back)\b|^(?:去|回|飞|到)|出差|旅"
)


@dataclass(slots=True)
class Fact:
    """A fact found by a rule, before it becomes a :class:`FragmentCandidate`."""

    content: str
    category: str
    key: str
    value: str | None = None
    polarity: int = 1
    single_valued: bool = False
    transient: bool = False
    expires_at: int | None = None
    confidence: float = 0.8


@dataclass(slots=True)
class PlanInfo:
    """A plan known from earlier messages or stored fragments (for date follow-ups)."""

    key: str
    action: str
    modal: str


@dataclass(slots=True)
class RuleContext:
    """What the rules know while reading one message.

    Attributes:
        ts_ms: The message time.
        today: The message's local calendar date.
        offset_minutes: UTC offset used to resolve dates.
        ttl_ms: Lifetime of transient facts without a resolvable end date.
        pets: Known pet names -> species ("" when unknown), from stored fragments and earlier
            messages of the batch.
        plans: Known plans, newest last.
        naming_next: Whether a later clause of the sentence being read names something ("给它取名叫
            雪球"): a pet got with any verb is then read as the user's.
    """

    ts_ms: int
    today: date
    offset_minutes: int
    ttl_ms: int
    pets: dict[str, str] = field(default_factory=dict)
    plans: list[PlanInfo] = field(default_factory=list)
    naming_next: bool = False

    def ttl_expiry(self) -> int:
        """Expiry of a transient fact said now, without its own end date."""
        return self.ts_ms + self.ttl_ms

    def period_expiry(self, period: Period) -> int:
        """Expiry of a fact bound to ``period`` (a day of grace after it ends)."""
        return max(period_end_ms(period, self.offset_minutes, PLAN_GRACE_DAYS), self.ts_ms + DAY_MS)

    def add_plan(self, key: str, action: str, modal: str) -> None:
        """Remember a plan so a later "the trip is Feb 10-14" can refine it."""
        self.plans = [p for p in self.plans if p.key != key]
        self.plans.append(PlanInfo(key, action, modal))

    def find_plan(self, topic: str) -> PlanInfo | None:
        """Return the newest known plan whose action mentions ``topic`` (``出差``, ``trip``).

        Travel words ("trip", "旅行") match any travel plan ("go to Chengdu", "去成都").
        """
        t = norm_key(topic).replace("_", " ")
        if not t:
            return None
        travel = t in _TRAVEL_TOPICS
        for plan in reversed(self.plans):
            action = plan.action.lower()
            key = plan.key.replace("_", " ")
            if t in action or t in key or (travel and _TRAVEL_ACTION.search(action)):
                return plan
        return None


_ZH_PLAN_CONTENT = lazy_compile(
    r"^用户(?P<modal>计划|想|打算)(?:\d{4}年(?:\d{1,2}月)?(?:\d{1,2}日)?(?:至(?:\d{4}年)?(?:\d{1,2}月)?\d{1,2}日)?"
    r"(?:（周末）)?)?(?P<action>.+?)。?$"
)
_EN_WHEN_TAIL = (
    r"(?:\s+(?:in|on|from) (?:the (?:week|weekend) of )?(?:\d{1,2}(?:-\d{1,2})? )?(?:[A-Z][a-z]+ )?"
    r"(?:\d{1,2} )?(?:to \d{1,2} )?(?:[A-Z][a-z]+ )?\d{4})?\.?$"
)
_EN_PLAN_CONTENT = lazy_compile(r"^User (?P<modal>plans|wants) to (?P<action>.+?)" + _EN_WHEN_TAIL)
_EN_EVENT_CONTENT = lazy_compile(r"^User (?P<aux>is|has) (?P<action>.+?)" + _EN_WHEN_TAIL)


def plan_action_from_content(content: str) -> tuple[str, str] | None:
    """Recover ``(action, modal)`` from a plan fragment's content written by these rules.

    Example:
        >>> plan_action_from_content("User wants to visit Japan in 2027.")
        ('visit Japan', 'wants')
        >>> plan_action_from_content("用户计划2026年2月10日至14日去成都出差。")
        ('去成都出差', '计划')
    """
    if has_cjk(content):
        m = _ZH_PLAN_CONTENT.match(content)
        return (m["action"], m["modal"]) if m else None
    m = _EN_PLAN_CONTENT.match(content)
    if m:
        return m["action"], m["modal"]
    m = _EN_EVENT_CONTENT.match(content)
    if m:
        return f"{'be' if m['aux'] == 'is' else 'have'} {m['action']}", "plans"
    return None
