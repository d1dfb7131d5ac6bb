"""Why convmem's block misses MADial-Bench memories: each missed relevant event, classified.

Loads one language's archive as fragments (as ``recall.py --madial-load fragments`` does), builds
the 300-token block for each dialogue and query form, and for every relevant event not in the block
says why, from the ranker's own scores (``payloads.ranker.Scorer``, IDF over the user's facts, as
the block computes it without turns):

- ``no shared term``: the event holds none of the query's terms (score 0);
- ``cut by the query cap``: it shares terms only with the part of the query the ranker's 128-term
  cap drops (the oldest terms of a long query);
- ``below the cut``: it scores, but the events ranked above it fill the budget; split by whether
  it ranks among the top ``len(relevant)`` (then the budget itself is short) or below;
- ``word only: <words>``: jieba finds a shared word the bigrams do not (words made only of the
  characters the search treats as function words left out; only one-character words can be such);

each with ``(BM25 has it)`` when the jieba BM25 baseline's block holds the event,

and for matched-but-missed events, how many of the bigrams that lifted the events ranked above it
cross a jieba word boundary (``上你``: a match no word-based search would make). Prints the counts
and ``--examples N`` misses of each query form with their query, the event and what outranked it.

Usage:
    python benchmarks/madial_misses.py ../shared/data/madial-bench --lang zh [--examples 10]
"""

from __future__ import annotations

import argparse
import collections
import logging
import random
import tempfile
from pathlib import Path

from benchmarks.recall_kit.locomo import Clock
from benchmarks.recall_kit.madial import (
    QUERY_MODES,
    UserIndex,
    bm25_block,
    convmem_block,
    day_ms,
    load_madial,
    load_user_memories,
    queries,
    split_event,
)
from benchmarks.recall_kit.text import contains, normalize, tokenize
from convmem_graph import ConvMemory
from convmem_graph.payloads.ranker import Scorer, text_terms
from convmem_graph.text.terms import _CJK_STOP, CJK_RUN, search_terms
from convmem_graph.tokens import count_tokens

#: MADial-Bench folder of each language.
MADIAL_LANGS = {"zh": "ch", "en": "en"}


def _content_words(text: str) -> set[str]:
    """jieba words of ``text`` minus those made only of the characters the search drops as function words."""
    return {w for w in tokenize(text) if not (CJK_RUN.fullmatch(w) and set(w) <= _CJK_STOP)}


def _cross_word(bigram: str, text: str) -> bool:
    """Whether every occurrence of a CJK ``bigram`` in ``text`` straddles a jieba word boundary."""
    if not CJK_RUN.fullmatch(bigram) or len(bigram) != 2:
        return False
    import jieba  # type: ignore[import-untyped]

    jieba.setLogLevel(logging.WARNING)
    words = jieba.lcut(text)
    inside = any(bigram in w for w in words)
    return bigram in text and not inside


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("madial", type=Path)
    p.add_argument("--lang", default="zh", choices=sorted(MADIAL_LANGS))
    p.add_argument("--budget", type=int, default=300)
    p.add_argument("--examples", type=int, default=8, help="misses printed per query form")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()

    dialogues, events = load_madial(args.madial / MADIAL_LANGS[args.lang])
    by_user: dict[int, dict[int, object]] = {}
    for e in events:
        by_user.setdefault(e.user_id, {})[e.id] = e
    asked_at = day_ms(max(e.time for e in events)) + 86_400_000
    workdir = Path(tempfile.mkdtemp(prefix="madial-misses-"))
    clock = Clock(asked_at)
    mem = ConvMemory.open(str(workdir / "m.db"), clock=clock)
    load_user_memories(mem, args.lang, events)
    clock.now_ms = asked_at
    indexes = {u: UserIndex(list(evs.values())) for u, evs in by_user.items()}
    rng = random.Random(args.seed)
    for mode in QUERY_MODES:
        causes: collections.Counter[str] = collections.Counter()
        misses: list[str] = []
        relevant_total = 0
        cross_above = matched_above = 0
        for d in dialogues:
            query = queries(d)[mode]
            block, _ = convmem_block(mem, args.lang, d.user_id, query, args.budget)
            bm_block, _ = bm25_block(indexes[d.user_id], query, args.budget)
            hay, bm_hay = normalize(block), normalize(bm_block)
            user_events = list(by_user[d.user_id].values())
            texts = [e.text for e in user_events]  # type: ignore[attr-defined]
            scorer = Scorer(query, None, texts)
            full_terms = search_terms(query, max_terms=None)
            # Query terms as the ranker compares them (stems, bigrams), before its cap.
            full = set(text_terms(" ".join(full_terms)))
            ranked = sorted(range(len(texts)), key=lambda i: -scorer.score(texts[i]))
            q_words = _content_words(query)
            for r in d.relevant:
                relevant_total += 1
                text = by_user[d.user_id][r].text  # type: ignore[attr-defined]
                if all(contains(normalize(piece), hay) for piece in split_event(text)):
                    continue
                bm = all(contains(normalize(piece), bm_hay) for piece in split_event(text))
                score = scorer.score(text)
                terms = set(text_terms(text))
                if score <= 0.0:
                    if full & terms:
                        cause = "cut by the query cap"
                    elif q_words & _content_words(text):
                        cause = f"word only: {'/'.join(sorted(q_words & _content_words(text)))}"
                    else:
                        cause = "no shared term"
                else:
                    position = ranked.index(texts.index(text))
                    cause = (
                        "below the cut, within the top len(relevant)"
                        if position < len(d.relevant)
                        else "below the cut, ranked lower"
                    )
                    for i in ranked[:position]:
                        held = [t for t in scorer.weights if t in set(text_terms(texts[i]))]
                        matched_above += len(held)
                        cross_above += sum(_cross_word(t, texts[i]) for t in held)
                causes[cause + (" (BM25 has it)" if bm else "")] += 1
                position = ranked.index(texts.index(text)) if score > 0 else -1
                shared = sorted(set(scorer.weights) & terms)
                above = [texts[i] for i in ranked[: max(position, 0)]][:3]
                misses.append(
                    f"- dialogue {d.index} [{cause}; rank {position + 1 if position >= 0 else '-'} of "
                    f"{len(texts)}; {len(d.relevant)} relevant; {count_tokens(text)} tokens; "
                    f"BM25 {'has' if bm else 'misses'} it]\n  query ({len(full_terms)} terms): "
                    f"{query[-160:]!r}\n  event: {text}\n  shared terms: {shared}\n"
                    + "".join(f"  above: {a}\n" for a in above)
                )
        n = sum(causes.values())
        print(f"\n## {args.lang} {mode}: {n} missed of {relevant_total} relevant events")
        for cause, c in causes.most_common():
            print(f"  {cause}: {c} ({100 * c / n:.0f} %)")
        if matched_above:
            print(
                f"  bigram matches of events ranked above a missed one that cross a jieba word: "
                f"{cross_above} of {matched_above} ({100 * cross_above / matched_above:.0f} %)"
            )
        for line in rng.sample(misses, min(args.examples, len(misses))):
            print(line)
    mem.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
