"""Per-turn variable inference (and a live turn) versus how many facts a memory holds, per key family.

Issue 24 item 1: ``_hobby_facts`` (``nodes/_inference.py``) used to walk every durable fact,
newest first with LIMIT/OFFSET, whenever fewer than 20 distinct hobby items existed, so a memory
of 30k ``like:`` facts cost a turn many times an empty memory's. This measures, for memories of
100 / 5k / 30k facts and an empty one, in two shapes over eight key families (``pref:``,
``habit:``, ``like:``, ``dislike:``, ``plan:``, ``family:`` (people), ``food:``, ``profile:``;
Chinese and English wording, several categories):

- ``few-hobbies``: the facts are of the six non-hobby families, plus 8 ``pref:``/``habit:``
  facts (fewer than 20 hobby items: the walk the old code did over everything);
- ``mixed``: the eight families in turn (plenty of hobby items: the old walk stopped early);
- ``only-<family>``: one family alone (the shapes of ``benchmarks/_facts.py``, the generator the
  unit tests share), so a cliff in any one family shows as its row.

Two figures per cell: ``infer`` is what ``update_variables`` runs for a turn that touched a
``pref:`` key (``infer_from_store`` for ``hobbies`` and ``language``), ``turn`` a live
``ConvMemory.ingest`` of one user/assistant pair (the heuristic extractor stores a ``pref:`` dislike).
Each is timed with the current code (``new``) and with the previous walks (``old``: copies of the
old ``_hobby_facts`` and of the old ``language`` count and OFFSET support walk, kept here and
swapped in for its rounds). Sizes and paths are interleaved
in rounds on one shared machine; figures are medians over rounds of each round's p50, and the
load average is printed before and after.

Usage (the ``code:`` line names the checkout measured; ``PYTHONPATH=.`` picks this one):
    PYTHONPATH=. python benchmarks/facts_cliff.py [--rounds 5] [--calls 20] [--turns 8]
        [--sizes 100,5000,30000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import convmem_graph
from convmem_graph.extractors.variables import (
    _LANG_WORDS,
    _MAX_LANGUAGE_SUPPORT,
    DEFAULT_VARIABLE_SPECS,
    MAX_LIST_ITEMS,
    _newest_first,
)
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Fragment, FragmentOp, VariableGuess
from convmem_graph.nodes import _inference
from convmem_graph.nodes._inference import _Facts, _hobby_item, affected_specs, infer_from_store
from convmem_graph.store._fact_queries import CJK_COUNTS, NEWEST_DURABLE
from convmem_graph.store._fragments import row_to_fragment
from convmem_graph.text.scripts import is_cjk_text

sys.path.insert(0, str(Path(__file__).resolve().parent))  # loaded by path from a test, too
from _facts import OTHER_FAMILIES, SHAPES, generated_ops  # noqa: E402

BASE_MS = 1_767_000_000_000
THINGS = ["羽毛球", "爵士乐", "拿铁", "徒步", "滑雪", "钢琴"]


def fact_ops(count: int, shape: str) -> list[FragmentOp]:
    """``count`` facts of ``shape`` (``few-hobbies`` or a name in ``_facts.SHAPES``), a second apart.

    ``few-hobbies``: the six non-hobby families plus 8 ``pref:``/``habit:`` facts, fewer than 20
    hobby items: the walk the old code did over every durable fact.
    """
    now = BASE_MS + count * 1000
    if shape == "few-hobbies":
        others = {f: 1 for f in OTHER_FAMILIES}
        ops = generated_ops(1, max(0, count - 8), others, now_ms=now, temporary=False, ties=False)
        return ops + generated_ops(2, min(count, 8), {"pref": 1, "habit": 1}, now_ms=now, temporary=False)
    return generated_ops(1, count, SHAPES[shape], now_ms=now, ties=False)


def old_newest(facts: _Facts, batch: int = 32) -> Iterator[Fragment]:
    """Every usable durable fact, newest stated first, paged with LIMIT/OFFSET as the store did.

    A copy of the walk before issue 24 (``MemoryStore.newest_durable_fragments``, since removed):
    a page deep in it re-reads every row before it.
    """
    offset = 0
    while True:
        with facts.store.read() as conn:
            stmt = NEWEST_DURABLE.limit(batch).offset(offset)
            rows = list(conn.execute(stmt, {"mid": facts.memory_id, "now": facts.now_ms}))
        yield from (row_to_fragment(r) for r in rows)
        if len(rows) < batch:
            return
        offset += batch
        batch = min(batch * 2, 1024)


def old_hobby_facts(facts: _Facts) -> list[Fragment]:
    """The walk before issue 24: every durable fact, newest first, until the items are full."""
    seen: list[Fragment] = []
    items: set[str] = set()
    cutoff: int | None = None
    for f in old_newest(facts):
        if cutoff is not None and f.observed_at < cutoff:
            break
        seen.append(f)
        item = _hobby_item(f)
        if item is not None and cutoff is None:
            items.add(item)
            if len(items) >= MAX_LIST_ITEMS:
                cutoff = f.observed_at
    if cutoff is None:
        return seen
    keys = [f"{p}{item.replace(' ', '_')}" for p in ("pref:", "habit:") for item in items]
    older = facts.with_keys(keys=keys)
    known = {f.id for f in seen}
    return seen + [f for f in older if f.id not in known]


def old_language(facts: _Facts) -> VariableGuess | None:
    """``language`` before: every usable durable fact counted, the support walked with OFFSET."""
    for f in _newest_first(facts.with_keys(keys=["profile:language"])):
        for rx, code in _LANG_WORDS:
            if rx.search(f.content):
                return VariableGuess(value=code, fragment_ids=[f.id])
    if facts.complete:
        zh = sum(1 for f in facts.page if is_cjk_text(f.content))
        other = len(facts.page) - zh
    else:
        with facts.store.read() as conn:
            total, zh = conn.execute(CJK_COUNTS, {"mid": facts.memory_id, "now": facts.now_ms}).one()
        other = int(total) - int(zh)
    if not zh and not other:
        return None
    code, want = ("zh", True) if zh >= other else ("en", False)
    support: list[Fragment] = []
    for f in old_newest(facts):
        if is_cjk_text(f.content) == want:
            support.append(f)
            if len(support) >= _MAX_LANGUAGE_SUPPORT:
                break
    return VariableGuess(value=code, fragment_ids=sorted(f.id for f in support))


@contextmanager
def code_path(path: str) -> Iterator[None]:
    """Run the block with the current walks (``new``) or the copies of the old ones."""
    current = _inference._hobby_facts, _inference._language
    if path == "old":
        _inference._hobby_facts, _inference._language = old_hobby_facts, old_language
    try:
        yield
    finally:
        _inference._hobby_facts, _inference._language = current


def timed(fn: Callable[[int], Any], start: int, count: int) -> float:
    """Median ms of ``fn(start + k)`` over ``count`` calls."""
    out = []
    for k in range(count):
        t0 = time.perf_counter()
        fn(start + k)
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def turn(i: int) -> list[dict[str, str]]:
    """One live turn: the user states a new dislike (a ``pref:`` fact), the assistant answers.

    A ``pref:`` key makes ``update_variables`` re-infer ``hobbies``; negative wording adds no
    hobby item, so the ``few-hobbies`` memories keep fewer than 20 items however many turns run.
    """
    thing = THINGS[i % len(THINGS)]
    return [
        {"role": "user", "content": f"我不喜欢{thing}{i}号。"},
        {"role": "assistant", "content": f"{thing}听起来很棒！你喜欢它哪一点？"},
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=20, help="timed inference calls per cell and round")
    parser.add_argument("--turns", type=int, default=8, help="timed live turns per cell and round")
    parser.add_argument("--sizes", default="100,5000,30000", help="fact counts (an empty memory is added)")
    parser.add_argument(
        "--shapes",
        default="few-hobbies,mixed,only-like,only-plan,only-family,only-food,only-profile,only-dislike",
        help=f"fact shapes (few-hobbies or of {', '.join(SHAPES)})",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-factscliff-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sizes = [0] + [int(s) for s in args.sizes.split(",")]
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load {os.getloadavg()}")
    # Which checkout is measured: an editable install elsewhere shadows this one (PYTHONPATH=.).
    print(f"code: {Path(convmem_graph.__file__).parent}")

    mem = ConvMemory.open(str(workdir / "cliff.db"))
    store = mem.store
    shapes = args.shapes.split(",")
    if "mixed" not in shapes:
        shapes.append("mixed")  # its empty memory is every row's baseline
    cells = [(shape, n) for shape in shapes for n in sizes if n or shape == "mixed"]
    for shape, n in cells:
        mid = f"{shape}_{n}"
        t0 = time.perf_counter()
        store.ensure_memory(mid)
        if n:
            store.commit_extraction(mid, fact_ops(n, shape), upto_seq=0, now_ms=BASE_MS)
        mem.lifecycle.run(mid)  # catch up: variables, snapshot
        print(f"filled {mid} in {time.perf_counter() - t0:.1f} s")

    specs = affected_specs(DEFAULT_VARIABLE_SPECS, ["pref:羽毛球"])  # hobbies and language
    now = BASE_MS + 10**9
    results: dict[tuple[str, str, int, str], list[float]] = {}
    for r in range(args.rounds):
        for path in ("new", "old"):
            with code_path(path):
                for shape, n in cells:
                    mid = f"{shape}_{n}"
                    ms = timed(
                        lambda _i, m=mid: infer_from_store(store, m, specs, now_ms=now),
                        0,
                        args.calls,
                    )
                    results.setdefault(("infer", shape, n, path), []).append(ms)
                    ms = timed(
                        lambda i, m=mid: mem.ingest(m, turn(i), source="openai"),
                        (r * 2 + (path == "old")) * args.turns,
                        args.turns,
                    )
                    results.setdefault(("turn", shape, n, path), []).append(ms)
    mem.close()

    print(f"\nload after: {os.getloadavg()}; medians over {args.rounds} rounds of each round's p50 (ms)")
    print(f"{'what':6} {'shape':16} {'facts':>6} {'new ms':>9} {'x empty':>8} {'old ms':>9} {'x empty':>8}")
    for what in ("infer", "turn"):
        empty = {p: statistics.median(results[(what, "mixed", 0, p)]) for p in ("new", "old")}
        for shape, n in cells:
            row = [statistics.median(results[(what, shape, n, p)]) for p in ("new", "old")]
            print(
                f"{what:6} {shape:16} {n:>6} {row[0]:>9.3f} {row[0] / empty['new']:>8.2f}"
                f" {row[1]:>9.3f} {row[1] / empty['old']:>8.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
