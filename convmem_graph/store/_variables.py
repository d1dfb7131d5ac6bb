"""Variable specs and values: manual values beside inferred ones, manual wins."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Connection, Row, select

from convmem_graph.models import VariableSpec, VariableValue, VariableValueType
from convmem_graph.store._driver import select_rows
from convmem_graph.store._queries import DELETE_VALUE, VALUES
from convmem_graph.store.schema import variable_specs

__all__ = [
    "check_name",
    "check_value",
    "effective_values",
    "read_values",
    "row_to_spec",
    "spec_for",
    "value_dict",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a valid variable name (as in :class:`VariableSpec`)."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 64:
        raise ValueError(f"variable name {name!r} must match [A-Za-z_][A-Za-z0-9_]* (at most 64 characters)")


def check_value(name: str, value: Any, spec: VariableSpec | None) -> VariableValueType:
    """Validate a value against the variable's spec (when one is defined).

    Raises:
        ValueError: The value has the wrong type or is not one of the allowed values.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | list):
        raise ValueError(f"variable {name!r}: value must be a string, an integer or a list of strings")
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise ValueError(f"variable {name!r}: list values must be strings")
    if spec is None:
        return value
    expected = {"string": str, "integer": int, "list": list}[spec.type]
    if not isinstance(value, expected):
        raise ValueError(f"variable {name!r}: spec type is {spec.type}, got {type(value).__name__}")
    if spec.allowed_values is not None:
        items = value if isinstance(value, list) else [str(value)]
        bad = [v for v in items if v not in spec.allowed_values]
        if bad:
            raise ValueError(f"variable {name!r}: {bad!r} not in allowed values {spec.allowed_values!r}")
    return value


def row_to_spec(row: Row[Any]) -> VariableSpec:
    """Build a VariableSpec from a ``cm_variable_specs`` row."""
    return VariableSpec(
        name=row.name,
        description=row.description,
        infer=bool(row.infer),
        type=row.type,
        allowed_values=row.allowed_values,
    )


def read_values(conn: Connection, memory_id: str) -> dict[tuple[str, str], VariableValue]:
    """Read every stored value of a memory, keyed by (name, origin)."""
    return {
        (row.name, row.origin): VariableValue(
            name=row.name,
            value=row.value,
            origin=row.origin,
            fragment_ids=list(row.fragment_ids or []),
            updated_at=row.updated_at,
        )
        for row in select_rows(conn, VALUES, {"mid": memory_id})
    }


def delete_value(conn: Connection, memory_id: str, name: str, origin: str) -> None:
    """Delete the stored ``manual`` or ``inferred`` value of one variable."""
    conn.execute(DELETE_VALUE, {"mid": memory_id, "name": name, "origin": origin})


def effective_values(stored: dict[tuple[str, str], VariableValue]) -> dict[str, VariableValue]:
    """Pick one value per name: the manual one when present, else the inferred one."""
    out: dict[str, VariableValue] = {}
    for (name, origin), value in sorted(stored.items()):
        if origin == "manual" or name not in out:
            out[name] = value
    return out


def value_dict(v: VariableValue | None) -> dict[str, Any] | None:
    """Audit representation of a value."""
    if v is None:
        return None
    return {"value": v.value, "origin": v.origin, "fragment_ids": list(v.fragment_ids)}


def spec_for(conn: Connection, memory_id: str, name: str) -> VariableSpec | None:
    """Return the spec of one variable, if defined."""
    stmt = select(variable_specs).where(
        variable_specs.c.memory_id == memory_id, variable_specs.c.name == name
    )
    row = conn.execute(stmt).first()
    return row_to_spec(row) if row is not None else None
