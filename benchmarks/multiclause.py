"""Held-out check: facts planted in longer, multi-clause turns (zh + en), read by the heuristic extractor.

``multiclause_heldout.jsonl`` beside this script holds turns written for this check (not taken from
any dataset, not used to write rules): each has the keys it must yield (``expect``; a key matches
itself or a longer key under it, ``family:aunt`` matches ``family:aunt:rosa``) and key prefixes it
must not yield (``forbid``: a friend's likes, a request, a count without an activity). Each turn is
extracted alone. Prints recall of the expected keys per language and the forbidden facts found.

Usage::

    python benchmarks/multiclause.py [--verbose]

To measure an older version, export its tree (``git archive <commit> convmem_graph | tar -x -C /tmp/old``)
and run this script with ``PYTHONPATH=/tmp/old``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Message
from convmem_graph.text.keys import canonical_key

HERE = Path(__file__).parent
TS = 1_767_268_822_030  # 2026-01-01 (UTC+8)


def _matches(key: str, want: str) -> bool:
    want = canonical_key(want) if want.count(":") and not want.endswith(":") else want
    return key == want or key.startswith(want if want.endswith(":") else want + ":")


def main() -> None:
    """Run the check and print the figures."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", type=Path, default=HERE / "multiclause_heldout.jsonl")
    p.add_argument("--verbose", action="store_true", help="print every miss and forbidden fact")
    args = p.parse_args()
    extractor = HeuristicExtractor()
    found_by: dict[str, list[int]] = {}
    forbidden: list[tuple[str, str]] = []
    for n, line in enumerate(args.file.read_text(encoding="utf-8").splitlines()):
        row = json.loads(line)
        msg = Message(
            id=f"t{n}", role="user", content=row["text"], channel="im", source="message", timestamp_ms=TS
        )
        keys = [canonical_key(c.key) for c in extractor.extract([msg], [], [], now_ms=0).candidates]
        hits = found_by.setdefault(row["lang"], [0, 0])
        for want in row["expect"]:
            ok = any(_matches(k, want) for k in keys)
            hits[0] += ok
            hits[1] += 1
            if not ok and args.verbose:
                print(f"miss  {want:28} {row['text']}  -> {keys}")
        for k in keys:
            if any(k.startswith(canonical_key(f) if not f.endswith(":") else f) for f in row["forbid"]):
                forbidden.append((k, row["text"]))
                if args.verbose:
                    print(f"FORBIDDEN {k:24} {row['text']}")
    total = [sum(v[0] for v in found_by.values()), sum(v[1] for v in found_by.values())]
    for lang, (hit, n) in sorted(found_by.items()):
        print(f"{lang}: {hit}/{n} = {hit / n:.2f}")
    print(f"all: {total[0]}/{total[1]} = {total[0] / total[1]:.2f}; forbidden facts: {len(forbidden)}")


if __name__ == "__main__":
    main()
