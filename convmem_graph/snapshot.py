"""The call-start snapshot: what the payload builders need of a memory, read in a few index reads.

Kept apart from the ``inject`` node so that building a payload (``convmem inject``,
``ConvMemory.payload()``) imports no LangGraph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from convmem_graph._held import HeldRows
from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
from convmem_graph.models import EpisodeSearch, Fragment, MemorySnapshot
from convmem_graph.payloads.fusion import meaning_query

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem_graph.store import MemoryStore

__all__ = [
    "DenseReads",
    "FactVectorReads",
    "SNAPSHOT_RECENT",
    "EpisodeReads",
    "build_snapshot",
    "render_call_start",
    "select_fragments",
    "with_episodes",
]


class EpisodeReads(Protocol):
    """The episodic search a call start makes.

    :class:`~convmem_graph.store.MemoryStore` and
    :class:`~convmem_graph.store.sqlite_reader.SqliteSnapshotReader` both answer it.
    """

    def search_episodes(self, memory_id: str, query: str, *, limit: int = 32) -> EpisodeSearch:
        """Candidate stored turns of ``memory_id`` for the words of ``query``."""
        ...


def select_fragments(fragments: list[Fragment], limit: int) -> list[Fragment]:
    """Keep the ``limit`` strongest fragments: stable before transient, then confidence, then recency."""
    ranked = sorted(
        fragments, key=lambda f: (f.transient, -f.confidence, -f.observed_at, -f.updated_at, f.id)
    )
    return ranked[:limit]


#: The newest turns a snapshot carries.
SNAPSHOT_RECENT = 30
#: Facts of each kind the summary reads past a quarter of its budget: a fact sentence costs several
#: tokens (a quarter of the budget in facts fills it), and the extractive summary stops after 64
#: pieces in a row that do not fit; the margin also covers skipped ones (restated variables, repeats).
_FACT_MARGIN = 128


def summary_fact_limit(budget_tokens: int) -> int:
    """How many of the strongest facts of each kind (durable, temporary) a summary of this budget reads.

    ``inject`` reads the store's kept fact lists with the same limit when no summary was made in
    its run, so both keep one list per memory current (another limit would read it all again).
    """
    return budget_tokens // 4 + _FACT_MARGIN


def build_snapshot(
    store: MemoryStore, memory_id: str, config: MemoryConfig, *, now_ms: int, held: HeldRows | None = None
) -> MemorySnapshot:
    """Read everything the payload builders need for ``memory_id`` from the store.

    ``held``: rows the run read already (a lifecycle run's ``summarize`` step); what they answer
    is not read again, as long as the run wrote nothing since (see :mod:`convmem_graph._held`).
    """
    if held is not None and not held.current(store.write_count()):
        held = None
    specs = store.get_specs(memory_id) or list(DEFAULT_VARIABLE_SPECS)
    limit = config.snapshot_max_fragments
    fragments = held.strongest(limit, now_ms) if held is not None else None
    if fragments is None and store.keeps_summary_facts:
        # No summary made in this run (most turns): the strongest facts from the lists the store
        # keeps current (``summary_facts``: only facts written since its last read are read, and
        # an unchanged fact is the same model, whose JSON ``save_snapshot`` then reuses), cut as
        # a summary's held rows are. Reading the 200 strongest rows again and making a model of
        # each was most of such a turn's CPU.
        reads = summary_fact_limit(config.summary_budget_tokens)
        durable, transient = store.summary_facts(memory_id, limit=reads, now_ms=now_ms)
        kept = HeldRows(writes=0, durable=durable, transient=transient, limit=reads, now_ms=now_ms)
        fragments = kept.strongest(limit, now_ms)
    if fragments is None:
        # The database picks the strongest facts by index (the same order as select_fragments).
        fragments = store.strongest_fragments(memory_id, limit=limit, now_ms=now_ms)
    values = held.variables if held is not None and held.variables is not None else None
    if values is None:
        values = store.get_variables(memory_id)
    summary = held.summary if held is not None and held.summary_read else store.get_summary(memory_id)
    recent = held.newest(SNAPSHOT_RECENT) if held is not None else None
    # Schema order first (name, birth year, city ...), then values of names no longer in the schema.
    order = {s.name: i for i, s in enumerate(specs)}
    variables = dict(sorted(values.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    return MemorySnapshot(
        memory_id=memory_id,
        variables=variables,
        specs={s.name: s for s in specs},
        fragments=select_fragments(fragments, limit),
        summary=summary,
        recent=recent if recent is not None else store.recent_messages(memory_id, SNAPSHOT_RECENT),
    )


@runtime_checkable
class DenseReads(Protocol):
    """The search by meaning a call start makes when an embeddings model is given."""

    def dense_episodes(self, memory_id: str, model: str, vector: list[float], *, limit: int) -> EpisodeSearch:
        """The stored turns of ``memory_id`` nearest ``vector`` (vectors made by ``model``)."""
        ...


@runtime_checkable
class FactVectorReads(Protocol):
    """The stored fact vectors a hybrid call start reads instead of embedding the facts."""

    def stored_fact_vectors(self, memory_id: str, model: str, facts: Sequence[Fragment]) -> dict[str, Any]:
        """The vectors by ``model`` of ``facts`` made from their current text, by fragment id."""
        ...


def with_fact_vectors(
    reads: object, snapshot: MemorySnapshot, embeddings: Embeddings | None
) -> MemorySnapshot:
    """``snapshot`` with its facts' stored vectors attached (``fact_vectors``), when there is a model.

    Without a model, or with reads that keep no fact vectors, the snapshot as it is (a block
    given a model then embeds the facts itself, as before vectors were stored).
    """
    if embeddings is None or not snapshot.fragments or not isinstance(reads, FactVectorReads):
        return snapshot
    from convmem_graph.embeddings import model_name  # LangChain: only with a model given

    found = reads.stored_fact_vectors(snapshot.memory_id, model_name(embeddings), snapshot.fragments)
    return snapshot.model_copy(update={"fact_vectors": found})


def with_episodes(
    reads: EpisodeReads,
    snapshot: MemorySnapshot,
    config: MemoryConfig,
    query: str | None,
    *,
    budget_tokens: int | None = None,
    embeddings: Embeddings | None = None,
) -> MemorySnapshot:
    """``snapshot`` with the stored turns that match ``query`` attached.

    With ``MemoryConfig(episodic=False)`` or no query, the snapshot as it is. The number of
    candidate turns read follows the block's budget (a quote is ~10-40 tokens). With
    ``embeddings`` (and a store that keeps turn vectors) the turns nearest the query by meaning
    are candidates too, their cosines in ``episodes.dense``; turns not embedded yet are found by
    their words only.
    """
    if not (config.episodic and query and query.strip()):
        return snapshot
    budget = budget_tokens or config.memory_block_budget_tokens
    limit = max(12, min(48, budget // 12))
    found = reads.search_episodes(snapshot.memory_id, query, limit=limit)
    if embeddings is not None and isinstance(reads, DenseReads):
        from convmem_graph.embeddings import model_name  # LangChain: only with a model given

        near = reads.dense_episodes(
            snapshot.memory_id,
            model_name(embeddings),
            embeddings.embed_query(meaning_query(query)),
            limit=limit,
        )
        held = {h.seq for h in found.hits}
        found.hits.extend(h for h in near.hits if h.seq not in held)
        found.dense = near.dense
    return snapshot.model_copy(update={"episodes": found})


#: Turns a call start with no query builds its query from (the newest ones, oldest first).
CONTEXT_TURNS = 4
#: Characters of the model-written summary's end added to that query (its newest topics).
_SUMMARY_TAIL = 200


def context_query(snapshot: MemorySnapshot) -> tuple[str, frozenset[str]]:
    """A query for a call start that has none: the newest turns, after the summary's last words.

    A voice call opens with no user input yet; what matters is what the last conversation was
    about. The query is the end of the model-written summary (its newest topics) and the newest
    :data:`CONTEXT_TURNS` turns, one per line, newest last: the ranker weighs the last line most.

    Returns:
        The query (``""`` when the memory has no turns and no summary) and the ids of the turns
        it was built from (not worth quoting back: they are the newest already).
    """
    turns = [m for m in snapshot.recent if m.content.strip() and not m.partial][-CONTEXT_TURNS:]
    lines: list[str] = []
    summary = snapshot.summary
    if summary is not None and summary.origin == "model" and summary.text.strip():
        lines.append(summary.text.strip()[-_SUMMARY_TAIL:])
    lines.extend(" ".join(m.content.split()) for m in turns)
    return "\n".join(lines), frozenset(m.id for m in turns)


def render_call_start(
    reads: EpisodeReads,
    snapshot: MemorySnapshot,
    vendor: str,
    options: Mapping[str, Any],
    *,
    config: MemoryConfig,
    now_ms: int,
    embeddings: Embeddings | None = None,
) -> Any:
    """The vendor payload of a call start: ``snapshot``, the turns matching ``options["query"]``.

    Without ``budget_tokens`` in ``options`` the block gets ``config.memory_block_budget_tokens``;
    see :func:`convmem_graph.payloads.render.render_payload` for the vendors and options.
    """
    from convmem_graph.payloads.render import FACTS_BY_MEANING, render_payload

    if embeddings is not None:
        from convmem_graph.embeddings import QueryOnce

        # The turns' search and the facts' ranking embed the same query: once (a model call
        # costs ~50-300 ms on a CPU; the rest of a call start, a few).
        embeddings = QueryOnce(embeddings)
    if options.get("budget_tokens") is None:
        options = {**options, "budget_tokens": config.memory_block_budget_tokens}
    query, budget = options.get("query"), options["budget_tokens"]
    if config.episodic and not (isinstance(query, str) and query.strip()):
        # No user input yet (a call opening): recall what the last conversation was about.
        # Its turns stay quotable: the block leaves out only the turns a payload already carries
        # as recent turns (``skip_recent_turns``); an Agora update carries none.
        query, _ = context_query(snapshot)
        if query:
            options = {**options, "query": query}
    snap = with_episodes(
        reads,
        snapshot,
        config,
        query if isinstance(query, str) else None,
        budget_tokens=budget if isinstance(budget, int) else None,
        embeddings=embeddings,
    )
    if embeddings is None:
        # Ranked by words: a query matching nothing gets the payload kept for such queries.
        from convmem_graph.payloads._kept_payloads import render_kept

        return render_kept(vendor, snap, dict(options), now_ms=now_ms)
    if vendor in FACTS_BY_MEANING and isinstance(query, str) and query.strip():
        # Only these vendors' blocks, and only with a query, rank facts by meaning: the others
        # read no vectors.
        snap = with_fact_vectors(reads, snap, embeddings)
    return render_payload(vendor, snap, dict(options), now_ms=now_ms, embeddings=embeddings)
