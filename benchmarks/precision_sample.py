"""Hand-judged precision of the heuristic extractor on turns it was not tuned on (MADial-Bench, LoCoMo).

The sample: every user line of the MADial-Bench dialogues (``ch/`` and ``en/``, the ``<Name>:`` lines
that are not the assistant's) and the LoCoMo turns outside the seeded sample that
``extraction_precision.py`` judges, each extracted alone (MADial at a fixed date, LoCoMo at its
session's date). Every fragment is looked up in ``precision_sample.jsonl`` beside this script
(``turn``, ``key``, ``content``, ``verdict``: ``correct`` when it is true of the speaker, said by
the speaker and worded faithfully). Prints correct / judged and lists fragments without a verdict.

A second slice, ``--slice persona``, is text no rule was written or tuned on (issue 25, second
pass): every DuLeMon persona sentence (``bot_persona``, ``user_said_persona``,
``user_no_said_persona``: first-person statements such as "我 喜欢 运动", spaces removed) and every
DuLeMon ``Bot:`` utterance (the bot speaks as a person with that persona), each extracted alone at a
fixed date, each judged as a fact about its speaker. Its verdicts are in ``precision_persona.jsonl``.
The slice is Chinese only: every English user line of the shared data is already in the first
slice or in ``extraction_precision.py``'s sample.

A third slice, ``--slice observations`` (issue 25, third pass), is the last text of the shared data
no sample held: LoCoMo's ``observation`` facts (LLM-written atomic facts about each speaker, each
tied to its turn), rewritten mechanically into the first person (see :func:`first_person`:
"Caroline is ..." -> "I am ...", "Melanie's kids ..." -> "My kids ..."; facts not opening with the
speaker's name are left out), each extracted alone at its session's date and judged as a fact about
the speaker against the rewritten sentence. Its verdicts are in ``precision_observations.jsonl``.
``--slice summaries`` does the same with LoCoMo's event summaries and session summaries (one
sentence at a time); they give few fragments (25 at the commit that added them), judged in
``precision_summaries.jsonl`` after the fixes the observations slice prompted, never tuned on.

A fifth slice, ``--slice own`` (issue 25, fourth pass): 195 chat turns written for it in the first
person (``precision_own_turns.jsonl``: 105 English, 90 Chinese; short statements, small talk,
requests and longer turns with discourse markers), written and judged in
``precision_own.jsonl`` before any rule of that pass changed, each extracted alone at a fixed date.

Usage::

    python benchmarks/precision_sample.py ../shared/data            # the figure
    python benchmarks/precision_sample.py ../shared/data --unjudged # fragments needing a verdict (JSON lines)
    python benchmarks/precision_sample.py ../shared/data --slice persona   # the second slice
    python benchmarks/precision_sample.py ../shared/data --slice observations   # the third
    python benchmarks/precision_sample.py ../shared/data --slice summaries      # the fourth (small)
    python benchmarks/precision_sample.py ../shared/data --slice own            # the fifth (our own text)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Message

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from extraction_precision import Turn, locomo_turns  # noqa: E402

MADIAL_TS = 1_700_000_000_000
_LINE = re.compile(r'^<(?P<who>[^>]+)>:\s*"?(?P<text>.*?)"?\s*$')


def madial_turns(data: Path) -> list[Turn]:
    """Every non-assistant line of the MADial-Bench dialogues, Chinese and English."""
    turns: list[Turn] = []
    for lang, name in (
        ("zh", "ch/MADial-Bench-zh-dialogue.json"),
        ("en", "en/MADial-Bench-en-dialogue.json"),
    ):
        lines = (data / "madial-bench" / name).read_text(encoding="utf-8").splitlines()
        for d, line in enumerate(lines):
            if not line.strip():
                continue
            for u, raw in enumerate(json.loads(line)["dialogue"]):
                m = _LINE.match(raw.strip())
                if m and m["who"] != "Assistant":
                    turns.append(Turn(f"madial-{lang}:{d}:{u}", m["text"], MADIAL_TS))
    return turns


def turns_of(data: Path) -> list[Turn]:
    """MADial user lines, then the LoCoMo turns that extraction_precision.py does not judge."""
    all_locomo = locomo_turns(data)
    # extraction_precision.py's sample (its defaults: 2000 turns, seed 9), judged there and tuned on.
    judged = {t.id for t in random.Random(9).sample(all_locomo, 2000)}
    return madial_turns(data) + [t for t in all_locomo if t.id not in judged]


_SPACE_IN_CJK = re.compile(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])")


def persona_turns(data: Path) -> list[Turn]:
    """Every DuLeMon persona sentence and ``Bot:`` utterance (spaces between Chinese words removed)."""
    turns: list[Turn] = []
    path = data / "dulemon-samples" / "samples.json"
    for s, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        session = json.loads(line)
        for field in ("bot_persona", "user_said_persona", "user_no_said_persona"):
            for raw in session[field]:
                pid, _, text = raw.partition(":")
                turns.append(
                    Turn(f"dulemon-persona:{s}:{pid.strip()}", _SPACE_IN_CJK.sub("", text.strip()), MADIAL_TS)
                )
        for u, raw in enumerate(session["conversation"]):
            speaker, _, rest = raw.partition(":")
            if speaker == "Bot":
                text = _SPACE_IN_CJK.sub("", rest.split("\t")[0].strip())
                turns.append(Turn(f"dulemon-bot:{s}:{u}", text, MADIAL_TS))
    return turns


_IRREGULAR = {"is": "am", "has": "have", "does": "do", "goes": "go", "was": "was"}


def _base_form(verb: str) -> str:
    """The first-person form of a third-person verb: ``is`` -> ``am``, ``enjoys`` -> ``enjoy``."""
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if re.search(r"[^aeiou]ies$", low):
        return low[:-3] + "y"
    if re.search(r"(?:ss|sh|ch|x|o|z)es$", low):
        return low[:-2]
    if low.endswith("s") and not low.endswith(("ss", "us", "is")):
        return low[:-1]
    return low


def first_person(fact: str, speaker: str) -> str | None:
    """A third-person fact about ``speaker`` said in the first person, or None when it does not open
    with the speaker's name.

    Example:
        >>> first_person("Caroline is planning a trip with her friends.", "Caroline")
        'I am planning a trip with my friends.'
        >>> first_person("Melanie's kids love the beach.", "Melanie")
        'My kids love the beach.'
    """
    name = speaker.split()[0]
    if fact.startswith(name + "'s "):
        out = "My " + fact[len(name) + 3 :]
    elif fact.startswith(name + " "):
        out = "I " + fact[len(name) + 1 :]
    else:
        return None
    out = re.sub(r"\b(?:her|his)\b(?=\s+[a-z])", "my", out)
    out = re.sub(r"\b(?:she|he)\b", "I", out)
    out = re.sub(r"\b(?:herself|himself)\b", "myself", out)
    # A pronoun turned into "I" takes its verb along: "which she finds" -> "which I find"; an
    # adverb between them is skipped ("I typically holds" -> "I typically hold").
    return _VERB_AFTER_I.sub(lambda m: f"I {m['adv'] or ''}{_base_form(m['verb'])}", out)


_NOT_VERBS = frozenset("always perhaps sometimes was thus less unless".split())
_VERB_AFTER_I = re.compile(
    r"\bI (?P<adv>(?:\w+ly|also|still|often|now|then|even|always|sometimes|never|usually) )?"
    r"(?P<verb>(?!(?:" + "|".join(_NOT_VERBS) + r")\b)[a-z]+s)\b"
)


def observation_turns(data: Path) -> list[Turn]:
    """Every LoCoMo observation opening with its speaker's name, first person, at its session's date."""
    turns: list[Turn] = []
    for sample in json.loads((data / "locomo" / "locomo10.json").read_text(encoding="utf-8")):
        conv = sample["conversation"]
        for key, by_speaker in sample["observation"].items():
            session = key.removesuffix("_observation")
            when = datetime.strptime(conv[f"{session}_date_time"], "%I:%M %p on %d %B, %Y")
            ts = int(when.replace(tzinfo=UTC).timestamp() * 1000)
            for speaker, facts in by_speaker.items():
                for n, (fact, dia_id) in enumerate(facts):
                    text = first_person(fact, speaker)
                    if text is not None:
                        turns.append(
                            Turn(f"locomo-obs:{sample['sample_id']}:{session}:{dia_id}:{n}", text, ts)
                        )
    return turns


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def summary_turns(data: Path) -> list[Turn]:
    """LoCoMo's event summaries and session summaries, each sentence opening with a speaker's name in
    the first person (as :func:`observation_turns` does), at its session's date."""
    turns: list[Turn] = []
    for sample in json.loads((data / "locomo" / "locomo10.json").read_text(encoding="utf-8")):
        conv = sample["conversation"]
        speakers = (conv["speaker_a"], conv["speaker_b"])
        texts: list[tuple[str, str, str]] = []  # (id, session, sentence)
        for key, events in sample["event_summary"].items():
            session = "session_" + key.removeprefix("events_session_")
            for speaker in speakers:
                for n, event in enumerate(events.get(speaker, [])):
                    texts.append((f"event:{session}:{speaker}:{n}", session, event))
        for key, summary in sample["session_summary"].items():
            session = key.removesuffix("_summary")
            for n, sentence in enumerate(_SENTENCE_END.split(summary)):
                texts.append((f"summary:{session}:{n}", session, sentence))
        for tid, session, sentence in texts:
            if f"{session}_date_time" not in conv:
                continue
            when = datetime.strptime(conv[f"{session}_date_time"], "%I:%M %p on %d %B, %Y")
            ts = int(when.replace(tzinfo=UTC).timestamp() * 1000)
            for speaker in speakers:
                text = first_person(sentence, speaker)
                if text is not None:
                    turns.append(Turn(f"locomo-{tid}:{sample['sample_id']}:{speaker}", text, ts))
    return turns


def own_turns(data: Path) -> list[Turn]:
    """The chat turns of our own written for the fifth slice (``data`` is not read)."""
    del data
    rows = (HERE / "precision_own_turns.jsonl").read_text(encoding="utf-8").splitlines()
    return [Turn(row["turn"], row["text"], MADIAL_TS) for row in map(json.loads, rows)]


def main() -> None:
    """Print the figure (or the fragments without a verdict)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path, help="the shared data folder (holding locomo/ and madial-bench/)")
    p.add_argument(
        "--slice", choices=("dialogues", "persona", "observations", "summaries", "own"), default="dialogues"
    )
    p.add_argument("--judgements", type=Path, help="verdicts (default: the slice's file beside this script)")
    p.add_argument("--unjudged", action="store_true")
    args = p.parse_args()
    files = {
        "dialogues": "precision_sample.jsonl",
        "persona": "precision_persona.jsonl",
        "observations": "precision_observations.jsonl",
        "summaries": "precision_summaries.jsonl",
        "own": "precision_own.jsonl",
    }
    judgements = args.judgements or HERE / files[args.slice]
    slices = {
        "dialogues": turns_of,
        "persona": persona_turns,
        "observations": observation_turns,
        "summaries": summary_turns,
        "own": own_turns,
    }
    verdicts: dict[tuple[str, str, str], str] = {}
    if judgements.exists():
        for line in judgements.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            verdicts[(row["turn"], row["key"], row["content"])] = row["verdict"]
    extractor = HeuristicExtractor()
    good = bad = 0
    missing: list[dict[str, str]] = []
    wrong: list[str] = []
    for t in slices[args.slice](args.data):
        msg = Message(
            id=t.id, role="user", content=t.text, channel="im", source="message", timestamp_ms=t.ts_ms
        )
        for c in extractor.extract([msg], [], [], now_ms=0).candidates:
            verdict = verdicts.get((t.id, c.key, c.content))
            if verdict is None:
                missing.append({"turn": t.id, "text": t.text, "key": c.key, "content": c.content})
            elif verdict == "correct":
                good += 1
            else:
                bad += 1
                wrong.append(f"{t.id} {c.key} {c.content}")
    if args.unjudged:
        for row in missing:
            print(json.dumps(row, ensure_ascii=False))
        return
    n = good + bad
    print(f"fragments: {n + len(missing)}, judged {n}, unjudged {len(missing)}")
    if n:
        print(f"precision: {good}/{n} = {good / n:.3f}")
    for w in wrong:
        print(f"  incorrect: {w}")


if __name__ == "__main__":
    main()
