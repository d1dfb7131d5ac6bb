"""Fragment writes: extraction operations and hand edits, with their audit rows.

A :class:`FragmentWriter` loads the fragments a step touches, applies the step in memory, and
writes the changed rows and the audit entries at the end, inside the caller's transaction.
Fragment ids are derived from (memory id, key, content), so replaying a step finds the rows it
already wrote and changes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any, Literal

from sqlalchemy import Connection, Row, Update, bindparam, inspect, select, update

from convmem_graph._ids import stable_id
from convmem_graph.models import Fragment, FragmentCandidate, FragmentOp
from convmem_graph.store._audit import audit_row, messages_cause, write_audit
from convmem_graph.store._derived import derived_columns, norm_hash
from convmem_graph.store._driver import execute_rows, select_rows
from convmem_graph.store._fact_vectors import delete_fact_vectors
from convmem_graph.store._messages import normalize_text
from convmem_graph.store._queries import FRAGMENTS_BY_ID, INSERT_FRAGMENTS
from convmem_graph.store.engine import chunked
from convmem_graph.store.schema import OBSOLETE_INDEXES, fragments

__all__ = [
    "FragmentWriter",
    "derived_columns",
    "fill_derived",
    "FRAGMENT_COLUMNS",
    "fragment_id",
    "fragment_of",
    "fragments_once",
    "manual_key",
    "norm_hash",
    "row_to_fragment",
    "upgrade_fragments",
]

logger = logging.getLogger(__name__)

Origin = Literal["extracted", "manual", "api"]
_AUDITED = ("content", "category", "key", "status", "transient", "expires_at")


def fragment_id(memory_id: str, key: str, content: str) -> str:
    """Return the stable id of a fragment with this key and content in this memory."""
    return stable_id("fr", memory_id, key, content)


def manual_key(category: str, content: str) -> str:
    """Return the key given to a hand-added fragment that came without one."""
    norm = normalize_text(content) or content.strip()
    return f"{category}:{norm[:48]}"


def fill_derived(conn: Connection, memory_id: str | None = None) -> int:
    """Fill the derived columns of rows that lack them (older versions, older exports).

    Args:
        conn: A connection inside a write transaction.
        memory_id: Only this memory's rows; ``None`` for every memory.

    Returns:
        How many rows were filled.
    """
    stmt = select(fragments.c.memory_id, fragments.c.id, fragments.c.key, fragments.c.content).where(
        fragments.c.ckey.is_(None)
    )
    if memory_id is not None:
        stmt = stmt.where(fragments.c.memory_id == memory_id)
    rows = list(conn.execute(stmt))
    for row in rows:
        conn.execute(
            update(fragments)
            .where(fragments.c.memory_id == row.memory_id, fragments.c.id == row.id)
            .values(**derived_columns(row.key, row.content))
        )
    return len(rows)


def index_names(conn: Connection, table: str = fragments.name) -> set[str]:
    """The names of ``table``'s indexes in the database (default ``cm_fragments``), in one catalog read.

    On SQLite from ``sqlite_master``: SQLAlchemy's reflection skips expression indexes there
    (``ix_cm_fragments_family``) with a warning, and would have every open create it again.
    """
    # One catalog read for all of them (a check per index cost a round trip each on every open).
    if conn.dialect.name == "sqlite":
        found = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
        )
        return {str(name) for (name,) in found}
    return {str(ix["name"]) for ix in inspect(conn).get_indexes(table)}


def upgrade_fragments(conn: Connection) -> None:
    """Bring an older database's fragments up to date: the derived columns' indexes and values.

    Indexes this version replaced (``OBSOLETE_INDEXES``) are dropped where found.
    """
    present = index_names(conn)
    for index in sorted(fragments.indexes, key=lambda i: str(i.name)):
        if str(index.name) not in present:
            index.create(conn)
    for name in sorted(present & set(OBSOLETE_INDEXES)):  # an older version made them again
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
    filled = fill_derived(conn)
    if filled:
        logger.info("filled the derived columns of %d fragments of an older database", filled)


#: The ``cm_fragments`` columns a Fragment is built from, in the order :func:`row_to_fragment` takes them.
FRAGMENT_COLUMNS = (
    "id",
    "memory_id",
    "content",
    "category",
    "key",
    "status",
    "transient",
    "expires_at",
    "source_message_ids",
    "origin",
    "superseded_by",
    "confidence",
    "created_at",
    "updated_at",
    "observed_at",
    "part_of",
    "part",
)
#: Reads :data:`FRAGMENT_COLUMNS` out of a row, by the row's column names (few distinct selects
#: read fragments, so this stays small).
_GETTERS: dict[tuple[str, ...], Callable[[Row[Any]], tuple[Any, ...]]] = {}


def _getter(fields: tuple[str, ...]) -> Callable[[Row[Any]], tuple[Any, ...]]:
    found = _GETTERS.get(fields)
    if found is None:
        found = _GETTERS[fields] = itemgetter(*(fields.index(name) for name in FRAGMENT_COLUMNS))
    return found


def row_to_fragment(row: Row[Any]) -> Fragment:
    """Build a Fragment from a ``cm_fragments`` row (any select that has its columns)."""
    # Positional reads: a Row's attribute access costs ~0.8 us a column, 17 columns were two
    # thirds of making a Fragment (a live turn makes a hundred or more), as for messages in _rows.py.
    return fragment_of(_getter(row._fields)(row))


def fragment_of(values: Sequence[Any]) -> Fragment:
    """A Fragment from the values of :data:`FRAGMENT_COLUMNS` in order (JSON column as text or decoded)."""
    (
        fid,
        memory_id,
        content,
        category,
        key,
        status,
        transient,
        expires_at,
        sources,
        origin,
        superseded_by,
        confidence,
        created_at,
        updated_at,
        observed_at,
        part_of,
        part,
    ) = values
    if isinstance(sources, str):  # a plain driver read returns the JSON text; SQLAlchemy decodes it
        sources = json.loads(sources)
    return Fragment(
        id=fid,
        memory_id=memory_id,
        content=content,
        category=category,
        key=key,
        status=status,
        transient=bool(transient),
        expires_at=expires_at,
        source_message_ids=list(sources or []),
        origin=origin,
        superseded_by=superseded_by,
        confidence=confidence,
        created_at=created_at,
        updated_at=updated_at,
        observed_at=observed_at or 0,
        part_of=part_of,
        part=part,
    )


def fragments_once(rows: Iterable[Row[Any]]) -> list[Fragment]:
    """The fragments of ``rows`` in order, each id once (the first row of it wins).

    For reads that join several index ranges, where one fact may come from two of them.
    """
    found: dict[str, Fragment] = {}
    for r in rows:
        if r.id not in found:
            found[r.id] = row_to_fragment(r)
    return list(found.values())


_UPDATES: dict[tuple[str, ...], Update] = {}


def _update_statement(names: tuple[str, ...]) -> Update:
    """``UPDATE`` of one fragment's columns ``names`` (binds ``w_memory_id``, ``w_id``, ``v_<name>``)."""
    stmt = _UPDATES.get(names)
    if stmt is None:
        stmt = _UPDATES[names] = (
            update(fragments)
            .where(fragments.c.memory_id == bindparam("w_memory_id"), fragments.c.id == bindparam("w_id"))
            .values({name: bindparam(f"v_{name}") for name in names})
        )
    return stmt


def _to_row(f: Fragment) -> dict[str, Any]:
    return {
        "memory_id": f.memory_id,
        "id": f.id,
        "content": f.content,
        "category": f.category,
        "key": f.key,
        "status": f.status,
        "transient": f.transient,
        "expires_at": f.expires_at,
        "source_message_ids": f.source_message_ids or None,
        "origin": f.origin,
        "superseded_by": f.superseded_by,
        "confidence": f.confidence,
        "created_at": f.created_at,
        "updated_at": f.updated_at,
        "observed_at": f.observed_at,
        "part_of": f.part_of,
        "part": f.part,
        **derived_columns(f.key, f.content),
    }


def _audited(f: Fragment) -> dict[str, Any]:
    return {name: getattr(f, name) for name in _AUDITED}


def _merge(old: Sequence[str], new: Iterable[str]) -> list[str]:
    merged = list(old)
    known = set(merged)
    for item in new:
        if item not in known:
            merged.append(item)
            known.add(item)
    return merged


class FragmentWriter:
    """Apply fragment changes of one step and write them with their audit rows.

    Args:
        conn: A connection inside a write transaction.
        memory_id: The memory every fragment belongs to.
        now_ms: Timestamp of the step.
        empty: The memory is known to hold no fragment (see ``MemoryStore.holds_no_facts``):
            loading reads nothing.
    """

    def __init__(self, conn: Connection, memory_id: str, now_ms: int, *, empty: bool = False) -> None:
        self._conn = conn
        self._memory_id = memory_id
        self._now = now_ms
        # The caller proved the memory holds no fragment (a memory its run created): loads read nothing.
        self._empty = empty
        self._state: dict[str, Fragment] = {}
        self._loaded: set[str] = set()
        self._new: set[str] = set()
        self._dirty: set[str] = set()
        self._audit: list[dict[str, Any]] = []
        # Facts whose stored vectors no longer hold (deleted, superseded, new text): dropped on flush.
        self._unembedded: set[str] = set()

    # -- loading ----------------------------------------------------------------------------
    def load(self, ids: Iterable[str]) -> None:
        """Read the given fragments (those of this memory that exist) into the writer."""
        wanted = sorted({i for i in ids if i not in self._loaded})
        self._loaded.update(wanted)
        if self._empty:
            return
        for part in chunked(wanted):
            params = {"mid": self._memory_id, "ids": list(part)}
            for row in select_rows(self._conn, FRAGMENTS_BY_ID, params):
                self._state[row.id] = row_to_fragment(row)

    def get(self, fragment_id_: str) -> Fragment | None:
        """Return the current (possibly changed) state of a loaded fragment."""
        self.load([fragment_id_])
        return self._state.get(fragment_id_)

    # -- primitive changes ------------------------------------------------------------------
    def _put(self, fragment: Fragment, *, new: bool = False) -> None:
        self._state[fragment.id] = fragment
        if new:
            self._new.add(fragment.id)
        elif fragment.id not in self._new:
            self._dirty.add(fragment.id)

    def _log(
        self, fid: str, action: Any, before: dict[str, Any] | None, after: dict[str, Any] | None, cause: str
    ) -> None:
        self._audit.append(
            audit_row(
                self._memory_id, self._now, "fragment", fid, action, before=before, after=after, cause=cause
            )
        )

    def add(
        self, c: FragmentCandidate, *, origin: Origin, cause: str, force: bool = False
    ) -> tuple[str, bool]:
        """Add a fragment for a candidate, or find the one already added.

        An inactive (deleted or superseded) fragment with the same id comes back to life when the
        candidate cites messages it did not have yet, or when ``force`` is set; otherwise the call is
        a replay and changes nothing.

        Returns:
            The fragment id and whether anything visible changed.
        """
        fid = fragment_id(self._memory_id, c.key, c.content)
        old = self.get(fid)
        if old is None:
            fragment = Fragment(
                id=fid,
                memory_id=self._memory_id,
                content=c.content,
                category=c.category,
                key=c.key,
                transient=c.transient,
                expires_at=c.expires_at,
                source_message_ids=_merge([], c.source_message_ids),
                origin=origin,
                confidence=c.confidence,
                created_at=self._now,
                updated_at=self._now,
                observed_at=c.observed_at,
            )
            self._put(fragment, new=True)
            self._log(fid, "add", None, _audited(fragment), cause)
            return fid, True
        merged = _merge(old.source_message_ids, c.source_message_ids)
        observed = max(old.observed_at, c.observed_at)
        if old.status == "active" or (not force and set(c.source_message_ids) <= set(old.source_message_ids)):
            if merged != old.source_message_ids or observed != old.observed_at:
                self._put(old.model_copy(update={"source_message_ids": merged, "observed_at": observed}))
            return fid, False
        revived = old.model_copy(
            update={
                "status": "active",
                "superseded_by": None,
                "category": c.category,
                "transient": c.transient,
                "expires_at": c.expires_at,
                "source_message_ids": merged,
                "confidence": c.confidence,
                "updated_at": self._now,
                "observed_at": observed,
            }
        )
        self._put(revived)
        self._log(fid, "add", {"status": old.status}, _audited(revived), cause)
        return fid, True

    def edit(
        self,
        fid: str,
        changes: dict[str, Any],
        *,
        cause: str,
        extra_ids: Sequence[str] = (),
        observed_at: int = 0,
    ) -> bool:
        """Change fields of a loaded fragment; audit only when an audited field changed.

        New source messages and a later ``observed_at`` (the fact was stated again) are recorded
        without an audit entry.
        """
        old = self._state[fid]
        merged = _merge(old.source_message_ids, extra_ids)
        observed = max(old.observed_at, observed_at)
        visible = {k: v for k, v in changes.items() if getattr(old, k) != v}
        if not visible:
            if merged != old.source_message_ids or observed != old.observed_at:
                self._put(old.model_copy(update={"source_message_ids": merged, "observed_at": observed}))
            return False
        new = old.model_copy(
            update={**visible, "source_message_ids": merged, "updated_at": self._now, "observed_at": observed}
        )
        # model_copy does not validate: re-validate so a bad edit fails before reaching the database.
        new = Fragment.model_validate(new.model_dump())
        self._put(new)
        if new.content != old.content:
            self._unembedded.add(fid)
        self._log(
            fid, "update", {k: getattr(old, k) for k in visible}, {k: getattr(new, k) for k in visible}, cause
        )
        return True

    def set_status(
        self, fid: str, status: Literal["superseded", "deleted"], *, by: str | None, cause: str
    ) -> bool:
        """Mark a loaded, not yet ``status`` fragment superseded (by ``by``) or deleted."""
        old = self._state[fid]
        if old.status == status:
            return False
        new = old.model_copy(update={"status": status, "superseded_by": by, "updated_at": self._now})
        self._put(new)
        self._unembedded.add(fid)
        after: dict[str, Any] = {"status": status}
        if by is not None:
            after["superseded_by"] = by
        self._log(
            fid, "supersede" if status == "superseded" else "delete", {"status": old.status}, after, cause
        )
        return True

    # -- extraction ---------------------------------------------------------------------------
    def apply(self, ops: Sequence[FragmentOp]) -> dict[str, int]:
        """Apply reconciliation operations; return how many of each op had an effect.

        An op that changes nothing (a replay, a duplicate) counts as ``noop``. ``update`` and
        ``supersede`` whose target is missing or no longer active fall back to ``add``.
        """
        counts = {"add": 0, "update": 0, "supersede": 0, "noop": 0}
        wanted: list[str] = []
        for op in ops:
            wanted.append(fragment_id(self._memory_id, op.candidate.key, op.candidate.content))
            if op.target_id:
                wanted.append(op.target_id)
        self.load(wanted)
        for op in ops:
            counts[self._apply_one(op)] += 1
        return counts

    def _apply_one(self, op: FragmentOp) -> str:
        c = op.candidate
        cause = messages_cause(c.source_message_ids, op.reason)
        target = self._state.get(op.target_id) if op.target_id else None
        if op.op == "noop":
            if target is not None:
                self.edit(
                    target.id, {}, cause=cause, extra_ids=c.source_message_ids, observed_at=c.observed_at
                )
            return "noop"
        active_target = target is not None and target.status == "active"
        if (
            op.op in ("update", "supersede")
            and target is not None
            and active_target
            and c.observed_at < target.observed_at
        ):
            # The stored fact was stated later than the candidate (an archive read out of order):
            # it stays; the older statement is kept as history, so any arrival order gives the
            # same profile (issue 10).
            return self._older_statement(op, target)
        if op.op == "update" and target is not None and active_target:
            changes = {
                "content": c.content,
                "category": c.category,
                "key": c.key,
                "transient": c.transient,
                "expires_at": c.expires_at,
            }
            changed = self.edit(
                target.id, changes, cause=cause, extra_ids=c.source_message_ids, observed_at=c.observed_at
            )
            return "update" if changed else "noop"
        if op.op == "supersede" and target is not None and active_target:
            fid = fragment_id(self._memory_id, c.key, c.content)
            if fid == target.id:
                self.edit(
                    target.id, {}, cause=cause, extra_ids=c.source_message_ids, observed_at=c.observed_at
                )
                return "noop"
            self.add(c, origin="extracted", cause=f"{cause}; supersedes {target.id}", force=True)
            self.set_status(target.id, "superseded", by=fid, cause=f"superseded by fragment {fid}")
            return "supersede"
        _, changed = self.add(c, origin="extracted", cause=cause)
        return "add" if changed else "noop"

    def _older_statement(self, op: FragmentOp, target: Fragment) -> str:
        c = op.candidate
        cause = messages_cause(c.source_message_ids, op.reason)
        fid = fragment_id(self._memory_id, c.key, c.content)
        if op.op == "update" or fid == target.id:
            # Same fact in other words: its sources join the newer fact, whose wording stays.
            self.edit(target.id, {}, cause=cause, extra_ids=c.source_message_ids, observed_at=c.observed_at)
            return "noop"
        _, added = self.add(c, origin="extracted", cause=f"{cause}; stated before {target.id}", force=True)
        stored = self._state.get(fid)
        if stored is not None and stored.status == "active":
            self.set_status(fid, "superseded", by=target.id, cause=f"stated before fragment {target.id}")
            return "supersede"
        return "add" if added else "noop"

    def link(self, fid: str, part_of: str, part: int) -> None:
        """Mark a loaded fragment as piece ``part`` of the long fact whose first piece is ``part_of``."""
        fragment = self.get(fid)
        if fragment is None:
            raise KeyError(fid)
        if (fragment.part_of, fragment.part) != (part_of, part):
            self._put(fragment.model_copy(update={"part_of": part_of, "part": part}))

    # -- writing ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write new and changed fragments and the audit rows."""
        if self._new:
            execute_rows(self._conn, INSERT_FRAGMENTS, [_to_row(self._state[i]) for i in sorted(self._new)])
        # One statement per row shape, run once for all the changed rows (in id order): building
        # and compiling an UPDATE per row cost more than SQLite's own work for it.
        run: list[dict[str, Any]] = []
        shape: tuple[str, ...] = ()
        for fid in sorted(self._dirty):
            row = _to_row(self._state[fid])
            del row["memory_id"], row["id"]
            names = tuple(row)
            if names != shape and run:
                execute_rows(self._conn, _update_statement(shape), run)
                run = []
            shape = names
            run.append({"w_memory_id": self._memory_id, "w_id": fid, **{f"v_{k}": v for k, v in row.items()}})
        if run:
            execute_rows(self._conn, _update_statement(shape), run)
        write_audit(self._conn, self._audit)
        if self._unembedded:
            # In the transaction that changes the facts: no reader pairs them with an old vector.
            delete_fact_vectors(self._conn, self._memory_id, sorted(self._unembedded))
        self._new.clear()
        self._dirty.clear()
        self._audit.clear()
        self._unembedded.clear()

    @property
    def changed(self) -> bool:
        """Whether any fragment row or audit entry is waiting to be written."""
        return bool(self._new or self._dirty or self._audit)
