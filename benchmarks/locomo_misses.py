"""Why convmem's lexical block misses LoCoMo answers: each strict miss, classified by where its answer is.

Ingests the chosen conversations as ``recall.py --locomo`` does (one memory each, one lifecycle
run per session), builds the block for every question (categories 1-4) at one budget, and for each
question whose answer the strict check does not find in the block says why:

- ``not in the conversation``: the whole conversation, as dated lines, does not hold the answer
  either (the strict check's ceiling: no ranking can find it);

otherwise, for each part of the answer missing from the block (a category-1 answer's comma parts,
else the whole answer), from the turns that hold that part (by the same check; a short part such
as ``2`` or ``yes`` is held by unrelated turns too, so its state is an upper bound):

- ``quoted, part cut``: one of those turns is quoted (its opening words are in the block) but
  the part is not: a clause excerpt or the quote cap cut it;
- ``candidate, ranked out``: one of them is among the candidates the block reads (the search's
  best ``--candidates``, by default what the call start reads at this budget) but lost the budget
  to others;
- ``beyond the candidates``: the search finds one, but below that count (``<2x`` when within twice
  the count);
- ``no shared term``: the search finds none of them (they share no term with the question).

A question takes the best state among its missing parts (in the order above); a question missing
two or more parts is also counted as ``several parts``. Prints the counts overall and per category,
and ``--examples N`` questions of each cause with their answer and missing parts; with ``--blocks``
each "candidate, ranked out" example also prints the candidates holding the missing part (their
rank in the search, normalized opening) and the block they lost to.

Usage:
    python benchmarks/locomo_misses.py ../shared/data/locomo/locomo10.json --conversations 0,1,2,3,4 \
        --budget 1000 [--examples 5]
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.recall import select_conversations
from benchmarks.recall_kit.locomo import Clock, ConversationIndex, ingest_session, load_locomo, memory_id
from benchmarks.recall_kit.text import answer_in_context, answer_parts, contains, normalize
from convmem_graph import ConvMemory

#: Causes, best first: a question missing several parts is counted under the best of theirs.
CAUSES = (
    "quoted, part cut",
    "candidate, ranked out",
    "beyond the candidates (<2x)",
    "beyond the candidates",
    "no shared term",
)
#: Turns read from the wide search that ranks every part's turns.
_WIDE = 1_000
#: Characters of a turn's normalized opening looked for in the block to call it quoted.
_OPENING = 40


def default_candidates(budget: int) -> int:
    """The candidate turns a call start reads at ``budget`` (``snapshot.with_episodes``'s rule)."""
    return max(12, min(48, budget // 12))


@dataclass
class Miss:
    """One missed question with an answer in the conversation."""

    category: int
    question: str
    answer: str
    cause: str
    parts: list[tuple[str, str]]  # (missing part, its state)
    block: str = ""  # the block as rendered (printed with ``--blocks``)
    #: The candidates holding a missing part: (rank in the search, the turn's opening).
    holders: list[tuple[int, str]] = field(default_factory=list)


def _part_state(part: str, holders: list[str], ranked: dict[str, int], block: str, candidates: int) -> str:
    """Where the turns holding ``part`` (normalized texts) stand for this question's block."""
    if any(h[:_OPENING] in block for h in holders):
        return CAUSES[0]
    ranks = [ranked[h] for h in holders if h in ranked]
    if not ranks:
        return CAUSES[4]
    best = min(ranks)
    if best < candidates:
        return CAUSES[1]
    return CAUSES[2] if best < 2 * candidates else CAUSES[3]


def main() -> int:
    """Run the analysis; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("locomo", type=Path, help="locomo10.json")
    p.add_argument("--conversations", help="by index or sample id, e.g. 0,1,2,3,4 (default: all)")
    p.add_argument("--budget", type=int, default=1000, help="block budget in tokens (1000)")
    p.add_argument(
        "--candidates", type=int, help="candidate turns the block reads (default: the call start's)"
    )
    p.add_argument("--examples", type=int, default=3, help="questions printed per cause")
    p.add_argument(
        "--blocks",
        action="store_true",
        help="with each 'candidate, ranked out' example, the block it lost to and its candidates' ranks",
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    candidates = args.candidates or default_candidates(args.budget)

    convs = select_conversations(load_locomo(args.locomo), args.conversations)
    clock = Clock()
    mem = ConvMemory.open(str(Path(tempfile.mkdtemp(prefix="locomo-misses-")) / "m.db"), clock=clock)
    counts: collections.Counter[str] = collections.Counter()
    by_cat: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    part_counts: collections.Counter[str] = collections.Counter()
    misses: list[Miss] = []
    try:
        for conv in convs:
            for session in conv.sessions:
                ingest_session(mem, conv, session, clock)
            mid = memory_id(conv)
            full = normalize(ConversationIndex(conv).full)
            turns = [normalize(t.text) for t in conv.turns]
            for q in conv.questions:
                messages = mem.payload(
                    mid, "openai", query=q.question, budget_tokens=args.budget, recent_turns=0
                )
                raw = str(messages[0]["content"]) if messages else ""
                block = normalize(raw)
                if answer_in_context(q.answer, q.category, block):
                    cause = "found"
                elif not answer_in_context(q.answer, q.category, full):
                    cause = "not in the conversation"
                else:
                    wide = mem.store.search_episodes(mid, q.question, limit=_WIDE)
                    ranked: dict[str, int] = {}
                    for rank, hit in enumerate(wide.hits):
                        ranked.setdefault(normalize(hit.message.content), rank)
                    parts = []
                    holding: list[tuple[int, str]] = []
                    for part in answer_parts(q.answer, q.category):
                        if contains(part, block):
                            continue
                        holders = [t for t in turns if contains(part, t)]
                        state = _part_state(part, holders, ranked, block, candidates)
                        if state == CAUSES[1]:
                            holding += sorted(
                                (ranked[t], t[: _OPENING * 3])
                                for t in holders
                                if ranked.get(t, candidates) < candidates
                            )
                        parts.append((part, state))
                        part_counts[state] += 1
                    # A part found only across a turn boundary (or in a caption) has no holder turn.
                    states = [s for _, s in parts]
                    cause = min(states, key=CAUSES.index) if states else CAUSES[4]
                    if len(parts) > 1:
                        counts["several parts"] += 1
                        by_cat[q.category]["several parts"] += 1
                    misses.append(Miss(q.category, q.question, str(q.answer), cause, parts, raw, holding))
                counts[cause] += 1
                by_cat[q.category][cause] += 1
    finally:
        mem.close()

    total = sum(v for k, v in counts.items() if k != "several parts")
    print(f"{total} questions, {len(convs)} conversations, budget {args.budget}, {candidates} candidates")
    for cause in ("found", "not in the conversation", *CAUSES, "several parts"):
        line = f"{counts[cause]:6d}  {cause}"
        cats = "  ".join(f"cat {c}: {by_cat[c][cause]}" for c in sorted(by_cat))
        print(f"{line:40s} {cats}")
    print("missing parts by state: " + ", ".join(f"{k} {v}" for k, v in part_counts.most_common()))
    for cause in CAUSES:
        shown = [m for m in misses if m.cause == cause][: args.examples]
        if shown:
            print(f"\n{cause}:")
            for m in shown:
                missing = "; ".join(f"{part!r}: {state}" for part, state in m.parts)
                print(f"  [cat {m.category}] {m.question} -> {m.answer!r}  ({missing})")
                if args.blocks and m.holders:
                    for rank, opening in m.holders:
                        print(f"      candidate #{rank}: {opening}")
                    print("      block:")
                    print("\n".join("        " + line for line in m.block.splitlines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
