"""Live turns of a LoCoMo slice, stored rows and payloads dumped: two trees must print the same digest.

Issue 24 item 2's check that a cheaper turn changes nothing a user can see. Each conversation's
dialogue is sent as live turns (one user/assistant pair per ``ConvMemory.ingest``, as the
middleware hands them over), on a SQLite file with a fixed clock that moves 90 s per turn. Every
third turn goes through ``Lifecycle.run`` with vendors (``inject`` then builds payloads), and
after every session the memory's call-start payloads are built (``openai``, ``trtc-llmconfig``,
``langchain``, and ``openai`` with the next turn as its query). At the end every ``cm_*`` table
is dumped, its rows sorted (checkpoint tables left out: they carry LangGraph's time-based ids;
the columns in :data:`WALL_CLOCK` masked), with the payloads and run results, and the script
prints one SHA-256 over all of it, and with ``--dump FILE`` writes it.

Usage (one tree, then the other; the digests must match):
    PYTHONPATH=. python benchmarks/turn_identity.py --conversations 2 --dump /tmp/a.json
    PYTHONPATH=/path/to/base python benchmarks/turn_identity.py --conversations 2 --dump /tmp/b.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import convmem_graph
from convmem_graph.memory import ConvMemory
from convmem_graph.state import RawInput

LOCOMO = Path("/work/shared/data/locomo/locomo10.json")
START_MS = 1_700_000_000_000
STEP_MS = 90_000
#: Columns stamped with the machine's time, not the memory's clock, and ``facts_cut`` (a trigger sets it
#: to ``random()``): masked, they differ run to run.
WALL_CLOCK = {
    ("cm_memories", "created_at"),
    ("cm_memories", "facts_cut"),
    ("cm_schema_migrations", "applied_at"),
}
VENDORS = ("openai", "trtc-llmconfig", "langchain")


def pairs(conversation: dict[str, Any]) -> list[tuple[int, list[dict[str, str]]]]:
    """The conversation's turns as (session, user/assistant pair) in order; speaker A is the user."""
    conv = conversation["conversation"]
    speaker_a = conv["speaker_a"]
    out: list[tuple[int, list[dict[str, str]]]] = []
    session = 1
    while f"session_{session}" in conv:
        turns = conv[f"session_{session}"]
        for k in range(0, len(turns), 2):
            pair = [
                {"role": "user" if t["speaker"] == speaker_a else "assistant", "content": t["text"]}
                for t in turns[k : k + 2]
            ]
            out.append((session, pair))
        session += 1
    return out


def dump_tables(path: Path) -> dict[str, list[list[Any]]]:
    """Every ``cm_*`` table's rows in a fixed order (bytes as hex)."""
    conn = sqlite3.connect(path)
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'cm_%' ORDER BY name"
            )
        ]
        out: dict[str, list[list[Any]]] = {}
        for name in names:
            cursor = conn.execute(f"SELECT * FROM {name}")  # noqa: S608 - names from sqlite_master
            wall = [i for i, d in enumerate(cursor.description) if (name, d[0]) in WALL_CLOCK]
            cells = [
                [None if i in wall else c.hex() if isinstance(c, bytes) else c for i, c in enumerate(row)]
                for row in cursor.fetchall()
            ]
            out[name] = sorted(cells, key=lambda r: json.dumps(r, ensure_ascii=False, default=str))
        return out
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=10**9, help="turn pairs per conversation at most")
    parser.add_argument("--dump", type=Path, default=None)
    args = parser.parse_args()
    data = json.loads(LOCOMO.read_text())
    workdir = Path(tempfile.mkdtemp(prefix="convmem-identity-"))
    db = workdir / "identity.db"
    clock = [START_MS]
    mem = ConvMemory.open(str(db), clock=lambda: clock[0], embed_in_background=False)
    record: dict[str, Any] = {"runs": [], "payloads": []}
    try:
        for c in range(args.conversations):
            mid = f"locomo_{c}"
            last_session = None
            for n, (session, pair) in enumerate(pairs(data[c])[: args.max_turns]):
                if last_session is not None and session != last_session:
                    for vendor in VENDORS:
                        record["payloads"].append([mid, vendor, mem.payload(mid, vendor)])
                    record["payloads"].append(
                        [mid, "openai?", mem.payload(mid, "openai", query=pair[0]["content"])]
                    )
                last_session = session
                clock[0] += STEP_MS
                if n % 3 == 2:
                    result = mem.lifecycle.run(mid, [RawInput(pair, "openai")], vendors=VENDORS)
                else:
                    result = mem.ingest(mid, pair, source="openai")
                record["runs"].append(result.model_dump(exclude={"node_ms"}))
            for vendor in VENDORS:
                record["payloads"].append([mid, vendor, mem.payload(mid, vendor)])
    finally:
        mem.close()
    record["tables"] = dump_tables(db)
    text = json.dumps(record, ensure_ascii=False, sort_keys=True, default=str)
    if args.dump is not None:
        args.dump.write_text(text)
    rows = sum(len(v) for v in record["tables"].values())
    print(f"code: {Path(convmem_graph.__file__).parent}")
    print(f"runs {len(record['runs'])}, payloads {len(record['payloads'])}, rows {rows}")
    print(f"sha256 {hashlib.sha256(text.encode()).hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
