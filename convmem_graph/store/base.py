"""The memory store's interface, split by record kind: what a backend implements.

Each kind is a :class:`typing.Protocol` (``runtime_checkable``): the memories themselves, messages
and the episodic index, facts and audit, variables, summaries and snapshots, dead letters, and the
sessions, runs and transactions they are made in. :class:`Store` is all of them together;
:class:`~convmem_graph.store.MemoryStore` (SQLite and PostgreSQL, one class, each database's policy
in ``store/sqlite.py`` and ``store/postgres.py``) implements it, and ``tests/unit/store/test_base.py``
checks its signatures against these. Code that needs one kind can ask for just that kind.

The interface holds reads any caller may want. Reads shaped for one node live beside that node
(what ``extract`` shows the extractor and reconciles with: ``nodes/_extract_reads.py``; what
variable inference reads: ``nodes/_inference.py``), built on :meth:`StoreScopes.read`, the index
statements of ``store/_fact_queries.py`` and, where the databases read them differently, the
store's ``backend``.

The conformance suite every backend runs is ``StoreContract`` (``tests/unit/store/test_repository.py``),
parametrized over the backends (SQLite file, SQLite in memory, PostgreSQL when
``CONVMEM_TEST_POSTGRES_URL`` is set).

Example:
    >>> from convmem_graph.store import MemoryStore
    >>> store = MemoryStore.from_url(":memory:")
    >>> isinstance(store, Store) and isinstance(store, MessageStore)
    True
    >>> store.close()
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, runtime_checkable

from sqlalchemy import Connection, Table

from convmem_graph.models import (
    EpisodeSearch,
    Fragment,
    FragmentOp,
    FragmentStatus,
    MemoryInfo,
    MemorySnapshot,
    Message,
    Summary,
    VariableGuess,
    VariableSpec,
    VariableValue,
    VariableValueType,
)
from convmem_graph.store.core import Cursors
from convmem_graph.store.records import AuditEntry, DeadLetter

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from numpy import ndarray

__all__ = [
    "DeadLetterStore",
    "FactStore",
    "MemoryRecordStore",
    "MessageStore",
    "Store",
    "StoreScopes",
    "SummaryStore",
    "VariableStore",
]


@runtime_checkable
class StoreScopes(Protocol):
    """Sessions, runs and transactions, and the processing cursors every record kind moves."""

    def close(self) -> None:
        """Release every database connection of the store."""
        ...

    def session(self) -> AbstractContextManager[Self]:
        """The store bound to one connection until the block ends."""
        ...

    def run(self, memory_id: str, *, flush_commit: bool = True) -> AbstractContextManager[Self]:
        """Serialize work on one memory; the yielded :class:`StoreRun` is the run's view of the store.

        ``flush_commit=False``: on PostgreSQL the run commits without waiting for the WAL flush.
        """
        ...

    def transaction(self, memory_id: str | None = None) -> AbstractContextManager[Connection]:
        """A write transaction on the store's database, committed when the block ends."""
        ...

    def read(self) -> AbstractContextManager[Connection]:
        """A connection for reads of tables of your own beside the store's (replay progress)."""
        ...

    def read_facts(self) -> AbstractContextManager[Connection]:
        """:meth:`read` for reads of facts, messages and variables only (a run's row changes stay held)."""
        ...

    def schema_transaction(self) -> AbstractContextManager[Connection]:
        """A :meth:`transaction` for creating or altering tables of your own beside the store's."""
        ...

    def ensure_tables(self, *tables: Table) -> None:
        """Make a feature's optional tables (SQLite makes them on first use) before it uses them."""
        ...

    def call_start_reads(self) -> AbstractContextManager[None]:
        """Inside, this thread's call-start reads on the store share one connection (SQLite files)."""
        ...

    def write_count(self) -> int:
        """How many writes were begun through this object (the store, or one run or session of it)."""
        ...

    def max_seq(self, memory_id: str) -> int:
        """Return the highest message seq of a memory (0 when it has none)."""
        ...

    def extracted_seq(self, memory_id: str) -> int:
        """Return the extraction cursor of a memory (0 when unknown)."""
        ...

    def summarized_seq(self, memory_id: str) -> int:
        """Return the summary cursor of a memory (0 when unknown)."""
        ...

    def cursors(self, memory_id: str) -> Cursors:
        """Return the processing state of a memory in one query (zeros if unknown)."""
        ...


@runtime_checkable
class MemoryRecordStore(Protocol):
    """The memories themselves: create, read, list, delete."""

    def ensure_memory(self, memory_id: str, description: str = "") -> MemoryInfo:
        """Create the memory if it does not exist yet, and return it."""
        ...

    def create_memory(self, memory_id: str | None = None, description: str = "") -> MemoryInfo:
        """Create a new memory (with a generated id when none is given)."""
        ...

    def get_memory(self, memory_id: str) -> MemoryInfo:
        """Return a memory with its message count and active fragment count."""
        ...

    def list_memories(self, *, limit: int = 100, offset: int = 0) -> list[MemoryInfo]:
        """List memories, oldest first, with their counters."""
        ...

    def delete_memory(self, memory_id: str, *, checkpointer: BaseCheckpointSaver[Any] | None = None) -> bool:
        """Delete every row of a memory in every store table, and its checkpoints."""
        ...

    def excluding_runs(self, memory_id: str) -> AbstractContextManager[Any]:
        """Hold a memory against its runs (a write inside never lands between a run's transactions)."""
        ...


@runtime_checkable
class MessageStore(Protocol):
    """Messages of a memory, the episodic index over them, turn vectors and the retention purge."""

    def add_messages(
        self,
        memory_id: str,
        messages: Sequence[Message],
        *,
        dedupe_window_ms: int = 10000,
        index: bool = True,
        interruptions: Sequence[tuple[str, str]] = (),
    ) -> list[str]:
        """Store new messages of a memory (creating the memory if needed), skipping duplicates."""
        ...

    def search_episodes(self, memory_id: str, query: str, *, limit: int = 32) -> EpisodeSearch:
        """Search the memory's stored turns (the episodic index) for the words of ``query``."""
        ...

    def compact_episodes(self) -> None:
        """Fold the episodic index's bulk-written parts together (a replay's end): searches read less."""
        ...

    def missing_turn_vectors(self, memory_id: str, model: str, *, limit: int = 64) -> list[tuple[int, str]]:
        """Up to ``limit`` of the memory's turns with no vector by ``model`` yet, oldest first."""
        ...

    def save_turn_vectors(self, memory_id: str, model: str, rows: list[tuple[int, list[float]]]) -> int:
        """Store turn vectors of one memory (``(seq, vector)``); a deleted turn's vector is not kept."""
        ...

    def dense_episodes(self, memory_id: str, model: str, vector: list[float], *, limit: int) -> EpisodeSearch:
        """The memory's stored turns nearest ``vector`` (vectors by ``model``), cosine in ``dense``."""
        ...

    def messages_after(
        self, memory_id: str, after_seq: int, *, limit: int = 500, known: Mapping[str, Message] | None = None
    ) -> list[tuple[int, Message]]:
        """Return up to ``limit`` messages with seq greater than ``after_seq``, in seq order."""
        ...

    def message_texts_after(
        self, memory_id: str, after_seq: int, *, limit: int = 500, known: Mapping[str, Message] | None = None
    ) -> list[tuple[int, str]]:
        """``(seq, content)`` of up to ``limit`` messages past ``after_seq``, in seq order."""
        ...

    def message_ids_after(self, memory_id: str, after_seq: int, *, limit: int = 500) -> list[tuple[int, str]]:
        """``(seq, id)`` of up to ``limit`` messages with seq greater than ``after_seq``, in seq order."""
        ...

    def recent_messages(self, memory_id: str, n: int) -> list[Message]:
        """Return the last ``n`` messages by (timestamp, seq), oldest first."""
        ...

    def get_messages(self, memory_id: str, ids: Sequence[str]) -> list[Message]:
        """Return the stored messages of this memory with these ids, in the order of ``ids``."""
        ...

    def count_messages(self, memory_id: str) -> int:
        """Return how many messages a memory holds."""
        ...

    def purge_messages(
        self, memory_id: str, *, before_ms: int, keep_recent: int, only_processed: bool = True
    ) -> int:
        """Delete old raw messages (retention), keeping the short-term window."""
        ...

    def purged_until(self, memory_id: str) -> int:
        """Return the newest ``timestamp_ms`` of the messages a purge deleted (0: never purged)."""
        ...


@runtime_checkable
class FactStore(Protocol):
    """Facts (fragments) of a memory, the live path's reads of them, and their audit trail."""

    def list_fragments(
        self,
        memory_id: str,
        *,
        status: FragmentStatus | None = "active",
        include_expired: bool = True,
        now_ms: int | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Fragment]:
        """List fragments of a memory, oldest first."""
        ...

    def get_fragment(self, memory_id: str, fragment_id: str) -> Fragment:
        """Return one fragment of a memory."""
        ...

    def holds_no_facts(self, memory_id: str) -> bool:
        """Whether this run proved the memory has no fact at all (``False``: unknown)."""
        ...

    def strongest_fragments(
        self, memory_id: str, *, limit: int, now_ms: int, transient: bool | None = None
    ) -> list[Fragment]:
        """The ``limit`` strongest live active fragments: durable first, then confidence, then recency."""
        ...

    def add_fragment(
        self,
        memory_id: str,
        content: str,
        *,
        category: str = "other",
        key: str | None = None,
        origin: Literal["manual", "api"] = "manual",
        transient: bool = False,
        expires_at: int | None = None,
        now_ms: int | None = None,
    ) -> Fragment:
        """Add a fragment by hand (or through an API); adding the same one again changes nothing."""
        ...

    def add_long_fragment(
        self,
        memory_id: str,
        content: str,
        *,
        category: str = "other",
        origin: Literal["manual", "api"] = "manual",
        now_ms: int | None = None,
    ) -> list[Fragment]:
        """Add a fact of any length as linked pieces of at most 200 characters, in one transaction."""
        ...

    def update_fragment(
        self,
        memory_id: str,
        fragment_id: str,
        *,
        content: str | None = None,
        category: str | None = None,
        now_ms: int | None = None,
    ) -> Fragment:
        """Edit a fragment's content and/or category by hand (audited when something changed)."""
        ...

    def delete_fragment(self, memory_id: str, fragment_id: str, *, now_ms: int | None = None) -> None:
        """Mark a fragment deleted (kept for the audit trail); deleting twice changes nothing."""
        ...

    def commit_extraction(
        self, memory_id: str, ops: Sequence[FragmentOp], *, upto_seq: int, now_ms: int
    ) -> dict[str, int]:
        """Apply one extraction step in one transaction and advance the extraction cursor."""
        ...

    def missing_fact_vectors(self, memory_id: str, model: str) -> list[tuple[str, str]]:
        """``(fragment id, text)`` of the memory's active facts with no valid vector by ``model``."""
        ...

    def save_fact_vectors(
        self, memory_id: str, model: str, rows: Sequence[tuple[str, str, list[float]]]
    ) -> int:
        """Store ``(fragment id, text, vector)`` rows; a fact deleted or edited since gets none."""
        ...

    def stored_fact_vectors(
        self, memory_id: str, model: str, facts: Sequence[Fragment]
    ) -> dict[str, ndarray]:
        """The stored vectors by ``model`` of ``facts`` made from their current text (the others lack one)."""
        ...

    def list_audit(
        self, memory_id: str, *, limit: int = 100, object_id: str | None = None
    ) -> list[AuditEntry]:
        """List the audit entries of a memory (of one fragment id or variable name), newest first."""
        ...


@runtime_checkable
class VariableStore(Protocol):
    """Variable specs and values (inferred and manual) of a memory."""

    def define_variables(self, memory_id: str, specs: Sequence[VariableSpec]) -> None:
        """Create or replace variable specs by name (new names go after the existing ones)."""
        ...

    def get_specs(self, memory_id: str) -> list[VariableSpec]:
        """Return the specs defined for a memory, in definition order (empty if none)."""
        ...

    def delete_spec(self, memory_id: str, name: str) -> None:
        """Remove a variable spec (stored values stay)."""
        ...

    def retire_variables(
        self, memory_id: str, names: Collection[str], *, now_ms: int | None = None
    ) -> list[str]:
        """Retire fields no longer in the schema: specs and values go, an audit entry keeps each value."""
        ...

    def get_variables(self, memory_id: str) -> dict[str, VariableValue]:
        """Return the effective value of each variable: the manual one wins over the inferred one."""
        ...

    def inferred_variables(self, memory_id: str) -> dict[str, VariableValue]:
        """Return the stored inferred values (manual values left out, even where they win)."""
        ...

    def set_manual_variable(
        self, memory_id: str, name: str, value: VariableValueType, *, now_ms: int | None = None
    ) -> VariableValue:
        """Set a value by hand; inference never overwrites it."""
        ...

    def clear_manual_variable(self, memory_id: str, name: str, *, now_ms: int | None = None) -> None:
        """Remove a hand-set value: the inferred value (if any) becomes effective again."""
        ...

    def commit_inferred_variables(
        self,
        memory_id: str,
        guesses: Mapping[str, VariableGuess],
        *,
        now_ms: int,
        inferable: Collection[str] = (),
        follow_up: Collection[str] = (),
    ) -> list[str]:
        """Store inferred values (kept apart from manual ones) in one transaction."""
        ...


@runtime_checkable
class SummaryStore(Protocol):
    """The summary of a memory and its cached call-start snapshot."""

    @property
    def keeps_summary_facts(self) -> bool:
        """Whether :meth:`summary_facts` reads only the facts written since its previous call."""
        ...

    def summary_facts(
        self, memory_id: str, *, limit: int, now_ms: int
    ) -> tuple[list[Fragment], list[Fragment]]:
        """The ``limit`` strongest live durable facts and the ``limit`` strongest temporary ones."""
        ...

    def get_summary(self, memory_id: str) -> Summary | None:
        """Return the current summary of a memory, if any."""
        ...

    def commit_summary(
        self,
        memory_id: str,
        text: str,
        *,
        tokens: int,
        covers_until_ms: int,
        upto_seq: int,
        now_ms: int,
        origin: Literal["model", "extractive"] = "model",
    ) -> Summary:
        """Store a new summary version and advance the summary cursor, in one transaction."""
        ...

    def save_snapshot(self, memory_id: str, snapshot: MemorySnapshot, *, now_ms: int) -> None:
        """Cache the call-start snapshot of a memory (one row, replaced)."""
        ...

    def load_snapshot(self, memory_id: str) -> MemorySnapshot | None:
        """Read the cached snapshot by primary key; None when absent or made stale by a change."""
        ...


@runtime_checkable
class DeadLetterStore(Protocol):
    """Payloads that could not be read."""

    def add_dead_letter(
        self, memory_id: str | None, *, source: str, raw: str, error: str, path: str = "$"
    ) -> bool:
        """Keep a raw item that failed to parse; the same item twice is stored once."""
        ...

    def list_dead_letters(self, memory_id: str | None = None, *, limit: int = 100) -> list[DeadLetter]:
        """List dead letters, newest first (of one memory, or of all when ``memory_id`` is None)."""
        ...


@runtime_checkable
class Store(
    StoreScopes,
    MemoryRecordStore,
    MessageStore,
    FactStore,
    VariableStore,
    SummaryStore,
    DeadLetterStore,
    Protocol,
):
    """The whole store: every record kind, and the sessions and runs to make calls in."""
