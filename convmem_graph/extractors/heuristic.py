"""The embedded default extractor: deterministic Chinese and English rules, no network, no model.

It reads first-person statements in user messages and rewrites them as third-person fragments
("我对芒果过敏" -> "用户对芒果过敏。", "I'm allergic to mango" -> "User is allergic to mango.").
Mixed-language messages are split into sentences and clauses, each read with the rules of its
own language.

What counts as a fact (and what does not):

- Statements about the user, durable or temporary. Ongoing activities are temporary states:
  "最近在学吉他" -> ``用户最近在学吉他。`` (transient), and so is learning something even without a time
  word ("我在学日语", "I'm learning Spanish"); other activities in progress need one ("最近在看三体"),
  since a bare "我在看电视" says what the user does this minute.
- Plans and wishes with a date after today ("我下个月要去成都出差", "我周末想在西湖边跑个 10 公里") are
  transient ``plan:`` facts that expire a day after their date; a plan said without a date needs a
  firm word (打算, 计划, 准备, planning to). Anything bound to the day it is said on ("今晚想吃点水果",
  "I'm going to the gym tonight"), a craving ("明天想吃火锅", "I want to grab a coffee") and a
  request or reminder ("明天早上 7 点提醒我去跑步", "remind me to call mom") yield nothing.
- Statements about relatives are about them, never about the user: "我妈妈喜欢跳舞" ->
  ``family:母亲:跳舞`` "用户的妈妈喜欢跳舞。"; later subject-less clauses of the sentence stay with
  the relative, and a named relative keeps the name ("my brother Sam lives in Leeds" ->
  ``family:brother:sam``). Statements about anyone else (他, 朋友, my friend ...) and reported
  speech ("我知道他喜欢…", "I heard Tom loves…") yield nothing.
- A name comes from a self-introduction ("我叫X", "我是X" with X a personal name, "I'm X", "my
  name is X"); naming a dish or a thing ("叫做回锅肉", "it's called X") never gives one.
- Noise (random characters, a pattern repeated, a bare verb or grammar word as the object:
  "喜欢吃") yields nothing.

Key scheme (``FragmentCandidate.key``), shared with the LLM extractor's prompt
(:mod:`convmem_graph.extractors.prompts`) and read by reconciliation and variable inference through
:mod:`convmem_graph.text.keys`. A key is ``<prefix>:<subject>``; the subject is the user's
own word in the language it was said in, normalized by :func:`~convmem_graph.text.keys.subject_key`
(NFKC, lower case, no edge punctuation or leading article, spaces as ``_``). So ``allergy:mango``
and ``allergy:芒果`` stay different keys; a model shown a stored fact reuses its key.

==============================  ==========================================  ===============
key                             meaning                                     single-valued
==============================  ==========================================  ===============
``profile:name``                name                                        yes
``profile:birth_year``          birth year (from an age and the message     yes
                                date, or said directly)
``profile:city``                city lived or worked in                     yes
``profile:hometown``            where the user is from                      yes
``profile:occupation``          job                                         yes
``profile:workplace``           employer / workplace                        yes
``profile:school``              school                                      yes
``profile:grade``               school grade ("三年级")                       yes
``profile:gender``              gender                                      yes
``profile:marital``             marital status                              yes
``pref:<object>``               likes (+1) / dislikes (-1)                  no
``pref:favorite_<thing>``       favourite thing (Chinese:                   yes
                                ``pref:最喜欢的<thing>``)
``food:<item>``                 eats/likes (+1) / avoids (-1) a food;       no
                                ``food:素食`` / ``food:vegetarian``
``allergy:<item>``              allergic (+1) / not allergic (-1)           no
``habit:<activity>``            habitual activity                           no
``health:<issue>``              lasting health issue                        no
``state:<state>``               temporary state or ongoing activity         no
                                (transient)
``pet:<name>``                  a pet (value: species; the species when     no
                                it has no name)
``pet:<name>:age``              a pet's age at the message date             yes
``family:<relation>``           a family member and who they are            no
                                (relation in its plain word: 母亲, mother)
``family:<relation>:<subject>`` another fact about them (likes, allergy,    no
                                age, health), or who a named relative is
                                (the subject is the name)
``plan:<action>``               a plan (transient, expires after its date)  no
``goal:<aim>``                  a long-term aim said without a date         no
                                ("我想学吉他")
==============================  ==========================================  ===============

Older spellings still relate on read: ``diet:`` is read as ``food:``, ``hobby:`` and
``preference:`` as ``pref:``, ``event:`` as ``plan:``, and keys with spaces as their ``_`` form.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

from convmem_graph.extractors._clauses import mark_discourse, normalize_clause
from convmem_graph.extractors._facts import DAY_MS, Fact, PlanInfo, RuleContext, plan_action_from_content
from convmem_graph.extractors._families import (
    clause_family_facts,
    could_state_family,
    merge_family_facts,
    split_allergy_lists,
)
from convmem_graph.extractors._noise import looks_like_noise
from convmem_graph.extractors._precision import carries_fact
from convmem_graph.extractors._rules_en import CONDITION_CLAUSE, could_state, extract_en_clause
from convmem_graph.models import (
    FRAGMENT_MAX_CHARS,
    ExtractionResult,
    Fragment,
    FragmentCandidate,
    Message,
    VariableSpec,
)
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import UNIFIED
from convmem_graph.text.scripts import Clause, clean_text, has_cjk, split_clauses
from convmem_graph.text.timeexpr import local_date

__all__ = ["SKIPPED_SOURCES", "HeuristicExtractor"]

logger = logging.getLogger(__name__)

#: Message sources that never carry user facts (system/app events, canned bot lines).
SKIPPED_SOURCES = frozenset({"command", "greeting", "silence", "llm_failure", "llm failure"})
# A message opening with a bracketed tag is injected or a placeholder: "[app] ...",
# "[think API injected] ...", "[image]".
_INJECTED = lazy_compile(r"^\s*\[[^\[\]\n]{1,40}\]")
_SPECIES_IN_CONTENT = lazy_compile(
    rf"的([{UNIFIED}]{{1,4}}?(?:猫|狗|犬|兔|鸟|鹦鹉|仓鼠|龟|鱼))|(?:a|an|one) ([a-z ]*?\b\w+) named"
)
_ZH_OFFSET = 8 * 60


class HeuristicExtractor:
    """Rule-based extractor for Chinese and English first-person statements.

    Candidates come only from ``role == "user"`` messages that are not partial, not from a
    system source (:data:`SKIPPED_SOURCES`), not injected placeholders, and only from clauses
    that are not questions or requests. It never fills variables (``infer_variables`` does that
    from the stored fragments) and never calls a model.

    Relative dates ("下个月", "next week", "I'm 29 this year") are resolved against the message's
    local date. The UTC offset is ``utc_offset_minutes`` when given, else the message's
    ``metadata["utc_offset_minutes"]``, else UTC+8 for a message containing Chinese and UTC
    otherwise.

    Example:
        >>> from convmem_graph.models import Message
        >>> m = Message(id="m1", role="user", content="我对芒果过敏", channel="im", source="message",
        ...             timestamp_ms=1767268822030)
        >>> [c.content for c in HeuristicExtractor().extract([m], [], [], now_ms=0).candidates]
        ['用户对芒果过敏。']
    """

    name = "heuristic"

    #: Newest known facts the extract step shows it: none, its rules read only known pets and plans
    #: (which the step always includes).
    known_facts = 0

    def __init__(self, *, transient_ttl_days: int = 7, utc_offset_minutes: int | None = None) -> None:
        """Create the extractor.

        Args:
            transient_ttl_days: Lifetime of temporary facts ("这周在试着吃素") without an end date.
            utc_offset_minutes: Fixed UTC offset for resolving dates; ``None`` guesses per message.

        Raises:
            ValueError: If ``transient_ttl_days`` is below 1.
        """
        if transient_ttl_days < 1:
            raise ValueError(f"transient_ttl_days must be >= 1, got {transient_ttl_days}")
        self._ttl_ms = transient_ttl_days * DAY_MS
        self._offset = utc_offset_minutes

    def extract(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        *,
        now_ms: int,
    ) -> ExtractionResult:
        """Extract fragment candidates from the user messages of a batch.

        Args:
            messages: The batch, both roles, in time order.
            existing: Stored fragments; active pets and plans give context ("年糕两岁了",
                "出差是 2 月 10 号到 14 号").
            specs: Variable specs (unused: variables are inferred from fragments separately).
            now_ms: Current time; transient facts already expired at this time are not proposed.

        Returns:
            Candidates in message order, ``variables={}`` and ``model_calls=0``.
        """
        pets, plans = _context_from(existing)
        ctx = RuleContext(0, local_date(0, 0), 0, self._ttl_ms, pets)
        ctx.plans = plans
        candidates: list[FragmentCandidate] = []
        for message in messages:
            if not _eligible(message):
                continue
            text = clean_text(message.content)
            if not text:
                continue
            cjk = has_cjk(text)
            if not cjk and not could_state(text, ctx) and not could_state_family(text):
                continue  # nothing first-person anywhere
            offset = self._offset_for(message, cjk)
            ctx.ts_ms = message.timestamp_ms
            ctx.offset_minutes = offset
            ctx.today = local_date(message.timestamp_ms, offset)
            facts = _facts_of(text, ctx, cjk)
            if not facts or looks_like_noise(text):  # the noise test runs only when a rule matched
                continue
            seen: set[tuple[str, str]] = set()
            for fact in facts:
                if fact.transient and fact.expires_at is not None and fact.expires_at <= now_ms:
                    continue
                if (fact.key, fact.content) in seen or len(fact.content) > FRAGMENT_MAX_CHARS:
                    continue
                if not carries_fact(fact):  # "用户每周两次。", "用户每天下班回来。"
                    continue
                fact.content = _balanced(fact.content)
                seen.add((fact.key, fact.content))
                candidates.append(_candidate(fact, message.id))
        logger.debug("heuristic extraction: %d messages -> %d candidates", len(messages), len(candidates))
        return ExtractionResult(candidates=candidates, variables={}, model_calls=0)

    def _offset_for(self, message: Message, cjk: bool) -> int:
        if self._offset is not None:
            return self._offset
        meta = message.metadata.get("utc_offset_minutes")
        if isinstance(meta, int) and not isinstance(meta, bool) and -720 <= meta <= 840:
            return meta
        return _ZH_OFFSET if cjk else 0


def _eligible(message: Message) -> bool:
    if message.role != "user" or message.partial or message.source in SKIPPED_SOURCES:
        return False
    head = message.content[:1]
    if head != "[" and not head.isspace():
        return True
    return not _INJECTED.match(message.content)


def _facts_of(text: str, ctx: RuleContext, cjk: bool) -> list[Fact]:
    """Facts of one message: clauses broken at discourse markers, families read, then the rules."""
    text = mark_discourse(text)
    clauses = split_clauses(text, lambda s: could_state(s, ctx) or could_state_family(s), cjk=cjk)
    extra = clause_family_facts(clauses, ctx)
    for n, clause in enumerate(clauses):
        # An English question yields nothing (extract_en_clause returns at its flag) and no other
        # clause reads it (``_conditional`` reads the clause before in the same sentence, and a
        # question is its sentence's last clause): its normalized text is never looked at, so it
        # is not computed (issue 24; a third of LoCoMo's clauses).
        if clause.zh or not clause.question:
            clauses[n] = clause._replace(text=normalize_clause(clause.text, zh=clause.zh))
    return split_allergy_lists(merge_family_facts(_rule_facts(clauses, ctx, cjk), extra))


def _zh_rules() -> Callable[[list[Clause], RuleContext], list[Fact]]:
    """The Chinese sentence rules, imported at the first Chinese sentence.

    Compiling their patterns is ~60 ms of CPU, a sixth of a fresh process's fixed cost of a
    replay (issue 24): a process that only ever reads English text never needs them.
    """
    from convmem_graph.extractors._rules_zh import extract_zh_sentence

    return extract_zh_sentence


def _rule_facts(clauses: list[Clause], ctx: RuleContext, cjk: bool) -> list[Fact]:
    facts: list[Fact] = []
    if not cjk:  # fast path: every clause is English
        for n, clause in enumerate(clauses):
            found = extract_en_clause(clause, ctx)
            if n and _conditional(clauses[n - 1], clause):
                found = [f for f in found if not f.key.startswith("habit:")]
            facts.extend(found)
        return facts
    i = 0
    while i < len(clauses):
        j = i
        while j < len(clauses) and clauses[j].sentence == clauses[i].sentence:
            j += 1
        sentence = clauses[i:j]
        zh: list[Clause] = [c for c in sentence if c.zh]
        if zh:
            facts.extend(_zh_rules()(zh, ctx))
        for clause in sentence:
            if not clause.zh:
                facts.extend(extract_en_clause(clause, ctx))
        i = j
    return facts


_PAIRS = (("《", "》"), ("“", "”"), ("「", "」"), ("『", "』"), ("（", "）"), ("(", ")"))


def _balanced(content: str) -> str:
    """Close a title or quote the clause splitter cut at its edge ("…是《傲慢与偏见。" gets its 》)."""
    for opening, closing in _PAIRS:
        if content.count(opening) > content.count(closing):
            stop = content[-1] if content[-1:] in "。." else ""
            content = content[: len(content) - len(stop)] + closing + stop
    return content


def _conditional(before: Clause, clause: Clause) -> bool:
    """Whether ``clause`` follows a bare condition of its sentence ("When I'm there, I usually ...").

    A habit said under a condition holds only then; stated alone it would say "always".
    """
    return before.sentence == clause.sentence and CONDITION_CLAUSE.match(before.text) is not None


def _candidate(fact: Fact, message_id: str) -> FragmentCandidate:
    return FragmentCandidate(
        content=fact.content,
        category=fact.category,
        key=fact.key,
        value=fact.value,
        polarity=-1 if fact.polarity < 0 else 1,
        single_valued=fact.single_valued,
        transient=fact.transient,
        expires_at=fact.expires_at,
        source_message_ids=[message_id],
        confidence=fact.confidence,
    )


def _context_from(existing: Sequence[Fragment]) -> tuple[dict[str, str], list[PlanInfo]]:
    """Known pets and plans from stored, active fragments (oldest first, so newer plans win)."""
    pets: dict[str, str] = {}
    plans: list[PlanInfo] = []
    for f in sorted(existing, key=lambda f: (f.updated_at, f.created_at, f.id)):
        if f.status != "active":
            continue
        parts = f.key.split(":")
        if parts[0] == "pet" and len(parts) == 2 and parts[1]:
            m = _SPECIES_IN_CONTENT.search(f.content)
            species = (m.group(1) or m.group(2) or "").strip() if m else ""
            name = parts[1]
            # Keys are lower-cased; keep the name as written when the content has it.
            found = re.search(re.escape(name), f.content, re.IGNORECASE)
            pets[found.group(0) if found else name] = species
        elif parts[0] == "plan" and len(parts) >= 2:
            parsed = plan_action_from_content(f.content)
            action, modal = (
                parsed
                if parsed
                else (f.key.removeprefix("plan:").replace("_", " "), "计划" if has_cjk(f.key) else "plans")
            )
            plans.append(PlanInfo(f.key, action, modal))
    return pets, plans
