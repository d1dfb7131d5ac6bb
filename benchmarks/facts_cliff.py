"""Per-turn variable inference (and a live turn) versus how many facts a memory holds, per key family.

Issue 24 item 1: ``_hobby_facts`` (``nodes/_inference.py``) used to walk every durable fact,
newest first with LIMIT/OFFSET, whenever fewer than 20 distinct hobby items existed, so a memory
of 30k ``like:`` facts cost a turn many times an empty memory's. This measures, for memories of
100 / 5k / 30k facts and an empty one, in two shapes over eight key families (``pref:``,
``habit:``, ``like:``, ``dislike:``, ``plan:``, ``family:`` (people), ``food:``, ``profile:``;
Chinese and English wording, several categories):

- ``few-hobbies``: the facts are of the six non-hobby families, plus 8 ``pref:``/``habit:``
  facts (fewer than 20 hobby items: the walk the old code did over everything);
- ``mixed``: the eight families in turn (plenty of hobby items: the old walk stopped early).

Two figures per cell: ``infer`` is what ``update_variables`` runs for a turn that touched a
``pref:`` key (``infer_from_store`` for ``hobbies`` and ``language``), ``turn`` a live
``ConvMemory.ingest`` of one user/assistant pair (the heuristic extractor stores a ``pref:`` dislike).
Each is timed with the current code (``new``) and with the previous walk (``old``, a copy of the
old ``_hobby_facts`` kept here and swapped in for its rounds). Sizes and paths are interleaved
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
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, MAX_LIST_ITEMS
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Fragment, FragmentCandidate, FragmentOp
from convmem_graph.nodes import _inference
from convmem_graph.nodes._inference import _Facts, _hobby_item, affected_specs, infer_from_store

BASE_MS = 1_767_000_000_000
#: (family, category, zh wording, en wording); ``{}`` is the subject.
FAMILIES: dict[str, tuple[str, str, str]] = {
    "pref": ("preference", "用户喜欢{}。", "User likes {}."),
    "habit": ("habit", "用户每周都{}。", "User goes {} every week."),
    "like": ("preference", "用户很喜欢{}。", "User really likes {}."),
    "dislike": ("preference", "用户不喜欢{}。", "User dislikes {}."),
    "plan": ("event", "用户打算{}。", "User plans to {}."),
    "family": ("relation", "用户的朋友叫{}。", "User's friend is called {}."),
    "food": ("preference", "用户爱吃{}。", "User loves eating {}."),
    "profile": ("profile", "用户的{}是秘密。", "User's {} is private."),
}
OTHERS = ("like", "dislike", "plan", "family", "food", "profile")
SUBJECTS_ZH = ["芒果", "跑步", "西湖", "猫", "成都", "咖啡", "围棋", "寿司", "摄影", "瑜伽"]
SUBJECTS_EN = ["coffee", "hiking", "guitar", "sushi", "chess", "tennis", "jazz", "pottery"]
THINGS = ["羽毛球", "爵士乐", "拿铁", "徒步", "滑雪", "钢琴"]


def fact_ops(count: int, shape: str) -> list[FragmentOp]:
    """``count`` distinct facts of ``shape`` (``few-hobbies`` or ``mixed``), observed a second apart."""
    families = list(FAMILIES) if shape == "mixed" else list(OTHERS)
    ops = []
    for j in range(count):
        family = families[j % len(families)]
        if shape != "mixed" and j % max(1, count // 8) == 0 and j // max(1, count // 8) < 8:
            family = ("pref", "habit")[j % 2]  # the few hobby facts, spread over the history
        category, zh, en = FAMILIES[family]
        chinese = j % 3 != 0
        subjects = SUBJECTS_ZH if chinese else SUBJECTS_EN
        subject = f"{subjects[j % len(subjects)]}{j}"
        ops.append(
            FragmentOp(
                op="add",
                candidate=FragmentCandidate(
                    content=(zh if chinese else en).format(subject),
                    category=category,
                    key=f"{family}:{subject}",
                    observed_at=BASE_MS + j * 1000,
                ),
            )
        )
    return ops


def old_hobby_facts(facts: _Facts) -> list[Fragment]:
    """The walk before issue 24: every durable fact, newest first, until the items are full."""
    seen: list[Fragment] = []
    items: set[str] = set()
    cutoff: int | None = None
    for f in facts.newest():
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


@contextmanager
def code_path(path: str) -> Iterator[None]:
    """Run the block with the current ``_hobby_facts`` (``new``) or the copy of the old one."""
    current = _inference._hobby_facts
    if path == "old":
        _inference._hobby_facts = old_hobby_facts
    try:
        yield
    finally:
        _inference._hobby_facts = current


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
    cells = [(shape, n) for shape in ("few-hobbies", "mixed") for n in sizes if n or shape == "mixed"]
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
    print(f"{'what':6} {'shape':12} {'facts':>6} {'new ms':>9} {'x empty':>8} {'old ms':>9} {'x empty':>8}")
    for what in ("infer", "turn"):
        empty = {p: statistics.median(results[(what, "mixed", 0, p)]) for p in ("new", "old")}
        for shape, n in cells:
            row = [statistics.median(results[(what, shape, n, p)]) for p in ("new", "old")]
            print(
                f"{what:6} {shape:12} {n:>6} {row[0]:>9.3f} {row[0] / empty['new']:>8.2f}"
                f" {row[1]:>9.3f} {row[1] / empty['old']:>8.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
