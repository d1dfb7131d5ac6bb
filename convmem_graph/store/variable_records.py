"""The variables of a memory: specs, inferred and manual values."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    delete,
    select,
)

from convmem_graph._time import now_ms as _now
from convmem_graph.models import (
    VariableGuess,
    VariableSpec,
    VariableValue,
    VariableValueType,
)
from convmem_graph.store import _queries as Q
from convmem_graph.store import _variables as var
from convmem_graph.store._audit import audit_row, write_audit
from convmem_graph.store._driver import execute_rows, select_rows
from convmem_graph.store.core import (
    SAME_MESSAGES,
    Cursors,
    StoreCore,
    check_memory_id,
)
from convmem_graph.store.engine import (
    execute_upsert,
    upsert,
)
from convmem_graph.store.schema import (
    variable_specs,
    variables,
)

if TYPE_CHECKING:
    pass

__all__ = ["VariableRecords"]


class VariableRecords(StoreCore):
    """Variables (see :class:`convmem_graph.store.base.VariableStore`)."""

    # -- variables ------------------------------------------------------------------------------
    def define_variables(self, memory_id: str, specs: Sequence[VariableSpec]) -> None:
        """Create or replace variable specs by name (new names go after the existing ones)."""
        check_memory_id(memory_id)
        now = _now()
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, now)
            positions = {
                r.name: r.position
                for r in conn.execute(
                    select(variable_specs.c.name, variable_specs.c.position).where(
                        variable_specs.c.memory_id == memory_id
                    )
                )
            }
            following = max(positions.values(), default=-1) + 1
            for spec in specs:
                if spec.name not in positions:
                    positions[spec.name] = following
                    following += 1
                values = {
                    "memory_id": memory_id,
                    "name": spec.name,
                    "position": positions[spec.name],
                    "description": spec.description,
                    "infer": spec.infer,
                    "type": spec.type,
                    "allowed_values": spec.allowed_values,
                }
                execute_upsert(conn, variable_specs, ("memory_id", "name"), values)
            if specs:
                self._touch(conn, memory_id, now)

    def get_specs(self, memory_id: str) -> list[VariableSpec]:
        """Return the specs defined for a memory, in definition order (empty if none)."""

        def load(conn: Connection) -> list[VariableSpec]:
            return [var.row_to_spec(r) for r in select_rows(conn, Q.SPECS, {"mid": memory_id})]

        return list(self._cached("specs", memory_id, load))

    def delete_spec(self, memory_id: str, name: str) -> None:
        """Remove a variable spec (stored values stay)."""
        with self._write(memory_id) as conn:
            stmt = delete(variable_specs).where(
                variable_specs.c.memory_id == memory_id, variable_specs.c.name == name
            )
            if conn.execute(stmt).rowcount:
                self._touch(conn, memory_id, _now())

    def retire_variables(
        self, memory_id: str, names: Collection[str], *, now_ms: int | None = None
    ) -> list[str]:
        """Retire fields no longer in the schema: their specs and values go, an audit entry keeps each value.

        Returns:
            The names that had a spec or a value to retire.
        """
        now = now_ms if now_ms is not None else _now()
        retired: list[str] = []
        with self._write(memory_id) as conn:
            stored = var.read_values(conn, memory_id)
            entries = []
            for name in names:
                had_spec = conn.execute(
                    delete(variable_specs).where(
                        variable_specs.c.memory_id == memory_id, variable_specs.c.name == name
                    )
                ).rowcount
                values = [(o, stored[(name, o)]) for o in ("manual", "inferred") if (name, o) in stored]
                for origin, value in values:
                    var.delete_value(conn, memory_id, name, origin)
                    entries.append(
                        audit_row(
                            memory_id,
                            now,
                            "variable",
                            name,
                            "delete",
                            before=var.value_dict(value),
                            after=None,
                            cause="retired: the field is no longer in the schema",
                        )
                    )
                if had_spec or values:
                    retired.append(name)
            if entries:
                write_audit(conn, entries)
            if retired:
                self._touch(conn, memory_id, now)
        return retired

    def _stored_values(self, memory_id: str) -> dict[tuple[str, str], VariableValue]:
        return self._cached("variables", memory_id, lambda conn: var.read_values(conn, memory_id))

    def get_variables(self, memory_id: str) -> dict[str, VariableValue]:
        """Return the effective value of each variable: the manual one wins over the inferred one."""
        return var.effective_values(self._stored_values(memory_id))

    def inferred_variables(self, memory_id: str) -> dict[str, VariableValue]:
        """Return the stored inferred values (manual values left out, even where they win)."""
        stored = self._stored_values(memory_id)
        return {name: v for (name, origin), v in stored.items() if origin == "inferred"}

    def set_manual_variable(
        self, memory_id: str, name: str, value: VariableValueType, *, now_ms: int | None = None
    ) -> VariableValue:
        """Set a value by hand; inference never overwrites it.

        Raises:
            ValueError: Bad name, or a value that does not fit the variable's spec.
        """
        check_memory_id(memory_id)
        var.check_name(name)
        now = now_ms if now_ms is not None else _now()
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, now)
            checked = var.check_value(name, value, var.spec_for(conn, memory_id, name))
            stored = var.read_values(conn, memory_id)
            old = stored.get((name, "manual"))
            if old is not None and old.value == checked:
                return old
            new = VariableValue(name=name, value=checked, origin="manual", updated_at=now)
            row = {
                "memory_id": memory_id,
                "name": name,
                "origin": "manual",
                "value": checked,
                "fragment_ids": None,
                "updated_at": now,
            }
            execute_upsert(conn, variables, ("memory_id", "name", "origin"), row)
            before = old or stored.get((name, "inferred"))
            entry = audit_row(
                memory_id,
                now,
                "variable",
                name,
                "set_manual",
                before=var.value_dict(before),
                after=var.value_dict(new),
                cause="set by hand",
            )
            write_audit(conn, [entry])
            self._touch(conn, memory_id, now)
        return new

    def clear_manual_variable(self, memory_id: str, name: str, *, now_ms: int | None = None) -> None:
        """Remove a hand-set value: the inferred value (if any) becomes effective again."""
        now = now_ms if now_ms is not None else _now()
        with self._write(memory_id) as conn:
            stored = var.read_values(conn, memory_id)
            old = stored.get((name, "manual"))
            if old is None:
                return
            var.delete_value(conn, memory_id, name, "manual")
            entry = audit_row(
                memory_id,
                now,
                "variable",
                name,
                "clear_manual",
                before=var.value_dict(old),
                after=var.value_dict(stored.get((name, "inferred"))),
                cause="cleared by hand; inference takes over",
            )
            write_audit(conn, [entry])
            self._touch(conn, memory_id, now)

    def commit_inferred_variables(
        self,
        memory_id: str,
        guesses: Mapping[str, VariableGuess],
        *,
        now_ms: int,
        inferable: Collection[str] = (),
        follow_up: Collection[str] = (),
    ) -> list[str]:
        """Store inferred values (kept apart from manual ones) in one transaction.

        Args:
            memory_id: The memory.
            guesses: New inferred values by name.
            now_ms: Current time.
            inferable: Names inference is responsible for: an inferred value of one of these
                that is not in ``guesses`` lost its supporting facts and is removed (audited).
            follow_up: Names whose change the caller follows with a second commit (a language
                change rewrites the diet): when one of them changed, the memory's facts stay
                marked as newer than its variables until that commit, so a run stopped in between
                is completed by the next one.

        Returns:
            Names whose inferred value changed (a new supporting fragment list alone is stored
            without audit and is not reported).
        """
        check_memory_id(memory_id)
        changed: list[str] = []
        # The values as they will be after this write, for the run's cache (a later read is free).
        after: dict[tuple[str, str], VariableValue] | None = None
        before: Cursors | None = self._peek("cursors", memory_id)
        with self._write(
            memory_id, keeps=frozenset({"specs", "summary"}) | SAME_MESSAGES, keeps_row=True
        ) as conn:
            self._ensure(conn, memory_id, now_ms)
            in_run = self._cache() is not None
            stored = self._stored_values(memory_id) if in_run else var.read_values(conn, memory_id)
            after = dict(stored) if in_run else None
            entries: list[dict[str, Any]] = []
            upserts: list[dict[str, Any]] = []
            for name in sorted(guesses):
                var.check_name(name)
                guess = guesses[name]
                old = stored.get((name, "inferred"))
                if old is not None and old.value == guess.value and old.fragment_ids == guess.fragment_ids:
                    continue
                upserts.append(
                    {
                        "memory_id": memory_id,
                        "name": name,
                        "origin": "inferred",
                        "value": guess.value,
                        "fragment_ids": list(guess.fragment_ids) or None,
                        "updated_at": now_ms,
                    }
                )
                new = VariableValue(
                    name=name,
                    value=guess.value,
                    origin="inferred",
                    fragment_ids=guess.fragment_ids,
                    updated_at=now_ms,
                )
                if after is not None:
                    after[(name, "inferred")] = new
                if old is not None and old.value == guess.value:
                    continue
                changed.append(name)
                cause = f"inferred from fragments [{', '.join(guess.fragment_ids)}]"
                if (name, "manual") in stored:
                    cause += "; the manual value stays effective"
                entries.append(
                    audit_row(
                        memory_id,
                        now_ms,
                        "variable",
                        name,
                        "infer",
                        before=var.value_dict(old),
                        after=var.value_dict(new),
                        cause=cause,
                    )
                )
            if upserts:
                # One statement for all of them (executemany: one round trip on PostgreSQL).
                keys = ("memory_id", "name", "origin")
                execute_rows(conn, upsert(self.dialect, variables, keys, tuple(upserts[0])), upserts)
            for name in sorted(set(inferable) - set(guesses)):
                old = stored.get((name, "inferred"))
                if old is None:
                    continue
                var.delete_value(conn, memory_id, name, "inferred")
                if after is not None:
                    after.pop((name, "inferred"), None)
                changed.append(name)
                entries.append(
                    audit_row(
                        memory_id,
                        now_ms,
                        "variable",
                        name,
                        "infer",
                        before=var.value_dict(old),
                        after=None,
                        cause="no active fact supports it any more",
                    )
                )
            write_audit(conn, entries)
            # Variables are inferred from the facts as they are now: the facts are not dirty any
            # more, unless a commit the caller still owes depends on this one's changes.
            dirty = int(any(name in changed for name in follow_up))
            held = self._held_row(memory_id)
            if changed:
                self._touch(conn, memory_id, now_ms, facts_dirty=dirty)
            elif held is not None:  # a PostgreSQL run: sent with the run's next change of the row
                held.set_dirty(dirty)
            else:
                execute_rows(conn, Q.SET_FACTS_DIRTY, {"mid": memory_id, "dirty": dirty})
        if after is not None:
            self._remember("variables", memory_id, after)
        if before is not None:
            self._remember("cursors", memory_id, before._replace(facts_dirty=bool(dirty)))
        return changed
