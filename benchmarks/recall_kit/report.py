"""Aggregate the per-question outcomes and print them as rich tables (or Markdown for the README)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

__all__ = [
    "CATEGORY_NAMES",
    "MadialRow",
    "Outcome",
    "Table2",
    "locomo_tables",
    "madial_table",
    "print_tables",
]

#: LoCoMo's categories as later work reads them (the dataset's README does not name them).
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass(frozen=True)
class Outcome:
    """One method's context for one LoCoMo question, and what was found in it.

    ``found`` is the first check's verdict; ``found_by`` holds every check run, by name
    (``{"strict": False, "issue": True}``).
    """

    conversation: str
    question: int
    category: int
    label: str
    found: bool
    tokens: int
    ms: float
    answer: str | None = None
    correct: bool | None = None
    found_by: dict[str, bool] = field(default_factory=dict)

    def found_under(self, check: str | None) -> bool:
        """The verdict of ``check`` (``None``: the first check's, :attr:`found`).

        Raises:
            KeyError: If ``check`` was not run for this outcome.
        """
        return self.found if check is None else self.found_by[check]


@dataclass(frozen=True)
class Table2:
    """A titled table of strings: what both the rich and the Markdown printers take."""

    title: str
    header: list[str]
    rows: list[list[str]]


def _pct(values: Sequence[bool]) -> str:
    return f"{100 * sum(values) / len(values):.1f}" if values else "-"


def _p95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def locomo_tables(
    outcomes: Sequence[Outcome], labels: Sequence[str], checks: Sequence[str] = ()
) -> list[Table2]:
    """Answer-in-context (and J, when graded) per category and overall, per method and budget.

    One answer-in-context table per name in ``checks`` (see ``recall_kit.text.CHECKS``); with
    none, one table of each outcome's :attr:`Outcome.found`.
    """
    categories = sorted({o.category for o in outcomes})
    counts = {c: len({(o.conversation, o.question) for o in outcomes if o.category == c}) for c in categories}
    total = len({(o.conversation, o.question) for o in outcomes})
    cat_head = [f"cat {c} {CATEGORY_NAMES.get(c, '')} (n={counts[c]})".replace("  ", " ") for c in categories]
    header = ["method", *cat_head, f"overall (n={total})", "mean tokens", "ms/query mean", "ms p50", "ms p95"]
    tables = []
    for check in checks or (None,):
        rows = []
        for label in labels:
            mine = [o for o in outcomes if o.label == label]
            if not mine:
                continue
            row = [label]
            row += [_pct([o.found_under(check) for o in mine if o.category == c]) for c in categories]
            row.append(_pct([o.found_under(check) for o in mine]))
            row.append(f"{statistics.fmean(o.tokens for o in mine):,.0f}")
            ms = [o.ms for o in mine]
            row += [f"{statistics.fmean(ms):.2f}", f"{statistics.median(ms):.2f}", f"{_p95(ms):.2f}"]
            rows.append(row)
        named = "" if check is None else f" ({check} check)"
        tables.append(Table2(f"LoCoMo answer-in-context{named}, % of questions", header, rows))
    graded = [o for o in outcomes if o.correct is not None or o.answer is not None]
    if graded:
        jrows = []
        for label in labels:
            mine = [o for o in graded if o.label == label]
            if not mine:
                continue
            row = [label]
            row += [_pct([o.correct is True for o in mine if o.category == c]) for c in categories]
            row.append(_pct([o.correct is True for o in mine]))
            row.append(str(sum(o.correct is None for o in mine)))
            jrows.append(row)
        jhead = ["method", *cat_head, f"overall (n={total})", "no label"]
        tables.append(Table2("LoCoMo LLM-judged accuracy J, %", jhead, jrows))
    return tables


@dataclass(frozen=True)
class MadialRow:
    """recall@block of one language, query mode and method, over the dialogues."""

    lang: str
    mode: str
    method: str
    recall: float
    hit: float
    tokens: float
    ms: float
    dialogues: int


def madial_table(rows: Sequence[MadialRow], budget: int) -> Table2:
    """One row per language, query mode and method (convmem's loads, then BM25)."""
    header = ["lang", "query", "method", "dialogues", f"recall@{budget}", "hit", "mean tokens", "ms/query"]
    out = [
        [
            r.lang,
            r.mode,
            r.method,
            str(r.dialogues),
            f"{100 * r.recall:.1f}",
            f"{100 * r.hit:.1f}",
            f"{r.tokens:.0f}",
            f"{r.ms:.2f}",
        ]
        for r in rows
    ]
    title = (
        f"MADial-Bench recall@block ({budget} tokens): % of a dialogue's relevant memories in the block "
        "(hit: % of dialogues with at least one)"
    )
    return Table2(title, header, out)


def print_tables(tables: Sequence[Table2], console: Console, *, markdown: bool = False) -> None:
    """Print tables with rich, or as Markdown (``markdown=True``) for pasting into a README."""
    for t in tables:
        if markdown:
            lines = [f"\n**{t.title}**\n", "| " + " | ".join(t.header) + " |"]
            lines.append("| " + " | ".join("---" for _ in t.header) + " |")
            lines += ["| " + " | ".join(row) + " |" for row in t.rows]
            for line in lines:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            continue
        table = Table(title=t.title, title_justify="left")
        for i, h in enumerate(t.header):
            table.add_column(h, justify="left" if i == 0 else "right")
        for row in t.rows:
            table.add_row(*row)
        console.print(table)
