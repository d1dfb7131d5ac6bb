"""Precision of the heuristic extractor on a fixed sample of real user turns, judged by hand.

The sample: every DuLeMon ``Usr:`` utterance and a seeded random sample of LoCoMo speaker turns
(each speaker of a LoCoMo conversation is a user talking about themselves). Each turn is extracted
alone, at its session's date. Every fragment is looked up in a judgement file written by hand
(``extraction_judgements.json`` beside this script): ``correct`` when the fragment is true of the
speaker, said by the speaker, and worded faithfully; ``incorrect`` otherwise. The figure reported
is correct / judged; fragments without a judgement are listed (judge them before quoting a figure).

It also counts, over all LoCoMo turns, how many turns yield at least one fragment.

Usage::

    python benchmarks/extraction_precision.py ../shared/data
    python benchmarks/extraction_precision.py ../shared/data --unjudged   # print what needs a verdict

To measure an older version, run this script with ``PYTHONPATH`` pointing at a checkout of it
(``git worktree add /tmp/old <commit>``; ``PYTHONPATH=/tmp/old python benchmarks/...``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Message

HERE = Path(__file__).parent
DEFAULT_JUDGEMENTS = HERE / "extraction_judgements.json"
DULEMON_TS = 1_700_000_000_000  # DuLeMon has no dates: a fixed one (2023-11-14)


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn of the sample: a stable id, its text and its time."""

    id: str
    text: str
    ts_ms: int


def locomo_turns(data: Path) -> list[Turn]:
    """Every LoCoMo turn (all speakers), timed at its session's date (UTC)."""
    turns: list[Turn] = []
    for sample in json.loads((data / "locomo" / "locomo10.json").read_text(encoding="utf-8")):
        conv = sample["conversation"]
        for key, session in conv.items():
            if not re.fullmatch(r"session_\d+", key) or not session:
                continue
            when = datetime.strptime(conv[f"{key}_date_time"], "%I:%M %p on %d %B, %Y")
            ts = int(when.replace(tzinfo=UTC).timestamp() * 1000)
            for t in session:
                turns.append(Turn(f"{sample['sample_id']}:{t['dia_id']}", t["text"], ts))
    return turns


def dulemon_turns(data: Path) -> list[Turn]:
    """Every DuLeMon ``Usr:`` utterance (segmentation spaces removed)."""
    turns: list[Turn] = []
    path = data / "dulemon-samples" / "samples.json"
    for s, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        for u, turn in enumerate(json.loads(line)["conversation"]):
            speaker, _, rest = turn.partition(":")
            if speaker == "Usr":
                text = rest.split("\t")[0].replace(" ", "")
                turns.append(Turn(f"dulemon:{s}:{u}", text, DULEMON_TS + u))
    return turns


def extract(turn: Turn, extractor: HeuristicExtractor) -> list[tuple[str, str]]:
    """The (key, content) of every candidate of one turn extracted alone."""
    msg = Message(
        id=turn.id, role="user", content=turn.text, channel="im", source="message", timestamp_ms=turn.ts_ms
    )
    return [(c.key, c.content) for c in extractor.extract([msg], [], [], now_ms=0).candidates]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the shared data folder (holds locomo/ and dulemon-samples/)")
    parser.add_argument("--judgements", type=Path, default=DEFAULT_JUDGEMENTS)
    parser.add_argument("--locomo-sample", type=int, default=2000, help="LoCoMo turns in the sample")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--unjudged", action="store_true", help="print unjudged fragments as JSON and exit")
    args = parser.parse_args(argv)

    extractor = HeuristicExtractor()
    all_locomo = locomo_turns(args.data)
    sample = random.Random(args.seed).sample(all_locomo, args.locomo_sample) + dulemon_turns(args.data)
    verdicts: dict[tuple[str, str], str] = {}
    if args.judgements.exists():
        for row in json.loads(args.judgements.read_text(encoding="utf-8")):
            verdicts[(row["turn"], row["content"])] = row["verdict"]

    found: list[tuple[str, str, str]] = []
    for turn in sample:
        found.extend((turn.id, key, content) for key, content in extract(turn, extractor))
    unjudged = [f for f in found if (f[0], f[2]) not in verdicts]
    if args.unjudged:
        rows = [{"turn": t, "key": k, "content": c, "verdict": ""} for t, k, c in unjudged]
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0

    judged = [verdicts[(t, c)] for t, _, c in found if (t, c) in verdicts]
    correct = sum(v == "correct" for v in judged)
    by_source: dict[str, list[int]] = {}
    for t, _, c in found:
        verdict = verdicts.get((t, c))
        if verdict is None:
            continue
        counts = by_source.setdefault("dulemon" if t.startswith("dulemon:") else "locomo", [0, 0])
        counts[0] += verdict == "correct"
        counts[1] += 1
    print(f"sample: {len(sample)} turns ({args.locomo_sample} LoCoMo, seed {args.seed}; all DuLeMon Usr)")
    print(f"fragments: {len(found)}, judged {len(judged)}, unjudged {len(unjudged)}")
    if judged:
        print(f"precision: {correct}/{len(judged)} = {correct / len(judged):.3f}")
    for source, (ok, n) in sorted(by_source.items()):
        print(f"  {source}: {ok}/{n} = {ok / n:.3f}")
    for t, k, c in found:
        if verdicts.get((t, c)) == "incorrect":
            print(f"  incorrect: {t} {k} {c}")
    turns_with = fragments = 0
    for turn in all_locomo:
        out = extract(turn, extractor)
        turns_with += bool(out)
        fragments += len(out)
    print(f"LoCoMo, all {len(all_locomo)} turns: {turns_with} turns -> {fragments} fragments")
    if unjudged:
        print(f"{len(unjudged)} fragments have no verdict: run with --unjudged", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
