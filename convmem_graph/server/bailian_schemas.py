"""Bailian profile schemas, kept in a table of their own beside the store, mapped onto variables.

A Bailian profile schema (``CreateProfileSchema``) is a named list of attributes that applies to
every user of a workspace; a convmem variable schema belongs to one memory. A schema is therefore
stored once here (table ``cm_bailian_profile_schemas``, declared in the store's registry and
created by its migrations; on SQLite by this class's first use) and, when ``AddMemory`` names it,
its attributes are added to that user's variable schema. Attribute names map to variable names:
a label of the default schema (``城市``, ``City``) is that variable (``city``); another
identifier-like name is kept; any other name becomes ``attr_<digest>``.

Example:
    >>> variable_name("城市"), variable_name("favourite_team"), variable_name("口味偏好")
    ('city', 'favourite_team', 'attr_998fdb01')
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, func, select

from convmem_graph._time import now_ms
from convmem_graph.errors import NotFoundError
from convmem_graph.payloads.memory_block import VARIABLE_LABELS
from convmem_graph.store import MemoryStore
from convmem_graph.store.registry import profile_schemas

__all__ = [
    "AttributeOperation",
    "ProfileAttribute",
    "ProfileSchema",
    "ProfileSchemaStore",
    "ProfileSchemaUpdate",
    "apply_operations",
    "variable_name",
]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class ProfileAttribute(BaseModel):
    """One attribute of a profile schema (a user-profile field).

    ``attribute_id`` is given by the server when the schema is created or the attribute added
    (``pa_`` + 16 hex digits) and names the attribute in ``attributes_operations``.
    """

    model_config = ConfigDict(extra="ignore")

    attribute_id: str | None = Field(default=None, max_length=64)
    name: str = Field(min_length=1, max_length=64)
    description: str = Field(default="", max_length=500)
    default_value: Any = None


class AttributeOperation(BaseModel):
    """One entry of ``UpdateProfileSchema``'s ``attributes_operations``."""

    model_config = ConfigDict(extra="ignore")

    op: Literal["add", "update", "delete"]
    attribute_id: str | None = Field(default=None, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=64)
    description: str | None = Field(default=None, max_length=500)
    default_value: Any = None


class ProfileSchemaUpdate(BaseModel):
    """An ``UpdateProfileSchema`` body (``PATCH /profile_schemas/{id}``)."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, min_length=1, max_length=32)
    description: str | None = Field(default=None, max_length=500)
    attributes_operations: list[AttributeOperation] | None = Field(default=None, max_length=100)
    memory_library_id: str | None = None


class ProfileSchema(BaseModel):
    """A Bailian ``CreateProfileSchema`` body (the fields convmem keeps)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=32)
    description: str = Field(default="", max_length=500)
    attributes: list[ProfileAttribute] = Field(min_length=1, max_length=100)
    extract_scene: Literal["efficient", "intelligent"] = "efficient"
    plan_version: Literal["pro", "lite"] | None = None
    memory_library_id: str | None = None


def variable_name(attribute: str) -> str:
    """Return the variable name that holds a profile attribute (see the module docstring)."""
    folded = attribute.strip().casefold()
    for name, labels in VARIABLE_LABELS.items():
        if folded == name or folded in (labels["zh"].casefold(), labels["en"].casefold()):
            return name
    if _IDENTIFIER.fullmatch(attribute.strip()):
        return attribute.strip()
    return "attr_" + hashlib.blake2b(attribute.strip().encode("utf-8"), digest_size=4).hexdigest()


def _new_attribute_id() -> str:
    return f"pa_{secrets.token_hex(8)}"


def _with_ids(schema: ProfileSchema, schema_id: str) -> ProfileSchema:
    """Give every attribute an id (a schema stored before ids existed gets stable derived ones)."""
    attributes = [
        a
        if a.attribute_id
        else a.model_copy(
            update={
                "attribute_id": "pa_"
                + hashlib.blake2b(f"{schema_id}\0{a.name}".encode(), digest_size=8).hexdigest()
            }
        )
        for a in schema.attributes
    ]
    return schema.model_copy(update={"attributes": attributes})


def apply_operations(schema: ProfileSchema, update: ProfileSchemaUpdate) -> ProfileSchema:
    """Return ``schema`` with ``update`` applied (name, description, then each operation in order).

    Raises:
        NotFoundError: An ``update`` or ``delete`` names an attribute id the schema does not have.
        ValueError: An operation lacks its required field, or names a duplicate; the message names
            ``attributes_operations[i].<field>``.
    """
    attributes = list(schema.attributes)
    for i, op in enumerate(update.attributes_operations or []):
        where = f"attributes_operations[{i}]"
        if op.op == "add":
            if not op.name:
                raise ValueError(f"{where}.name: required to add an attribute")
            if any(a.name == op.name for a in attributes):
                raise ValueError(f"{where}.name: the schema already has an attribute {op.name!r}")
            attributes.append(
                ProfileAttribute(
                    attribute_id=_new_attribute_id(),
                    name=op.name,
                    description=op.description or "",
                    default_value=op.default_value,
                )
            )
            continue
        if not op.attribute_id:
            raise ValueError(f"{where}.attribute_id: required to {op.op} an attribute")
        index = next((k for k, a in enumerate(attributes) if a.attribute_id == op.attribute_id), None)
        if index is None:
            raise NotFoundError(f"{where}.attribute_id: no attribute {op.attribute_id!r} in this schema")
        if op.op == "delete":
            del attributes[index]
            continue
        changes: dict[str, Any] = {}
        if op.name is not None:
            if any(a.name == op.name for k, a in enumerate(attributes) if k != index):
                raise ValueError(f"{where}.name: the schema already has an attribute {op.name!r}")
            changes["name"] = op.name
        if op.description is not None:
            changes["description"] = op.description
        if "default_value" in op.model_fields_set:
            changes["default_value"] = op.default_value
        attributes[index] = attributes[index].model_copy(update=changes)
    if not attributes:
        raise ValueError("attributes_operations: a schema keeps at least one attribute")
    if len(attributes) > 100:
        raise ValueError("attributes_operations: a schema has at most 100 attributes")
    values: dict[str, Any] = {"attributes": attributes}
    if update.name is not None:
        values["name"] = update.name
    if update.description is not None:
        values["description"] = update.description
    return schema.model_copy(update=values)


class ProfileSchemaStore:
    """Profile schemas in the store's database.

    Args:
        store: The memory store whose database holds the table.
    """

    def __init__(self, store: MemoryStore) -> None:
        # The table is the store's registry's; an optional one, which a SQLite file gets here.
        self.store = store
        store.ensure_tables(profile_schemas)

    def create(self, schema: ProfileSchema) -> str:
        """Store a schema and return its new id (``ps_`` + 24 hex digits)."""
        schema_id = f"ps_{secrets.token_hex(12)}"
        attributes = [a.model_copy(update={"attribute_id": _new_attribute_id()}) for a in schema.attributes]
        body = json.dumps(
            schema.model_copy(update={"attributes": attributes}).model_dump(), ensure_ascii=False
        )
        with self.store.transaction() as conn:
            conn.execute(profile_schemas.insert().values(id=schema_id, body=body, created_at=now_ms()))
        return schema_id

    def get(self, schema_id: str) -> ProfileSchema:
        """Return a stored schema.

        Raises:
            NotFoundError: If there is no schema with this id.
        """
        with self.store.read() as conn:
            row = conn.execute(
                select(profile_schemas.c.body).where(profile_schemas.c.id == schema_id)
            ).first()
        if row is None:
            raise NotFoundError(f"profile schema {schema_id!r} not found")
        return _with_ids(ProfileSchema.model_validate_json(row.body), schema_id)

    def page(self, *, offset: int = 0, limit: int = 10) -> tuple[list[tuple[str, ProfileSchema]], int]:
        """Return one page of ``(schema id, schema)``, oldest first, and how many there are in all."""
        stmt = (
            select(profile_schemas.c.id, profile_schemas.c.body)
            .order_by(profile_schemas.c.created_at, profile_schemas.c.id)
            .offset(offset)
            .limit(limit)
        )
        with self.store.read() as conn:
            rows = conn.execute(stmt).all()
            total = int(conn.execute(select(func.count()).select_from(profile_schemas)).scalar() or 0)
        return [(r.id, _with_ids(ProfileSchema.model_validate_json(r.body), r.id)) for r in rows], total

    def update(self, schema_id: str, update: ProfileSchemaUpdate) -> ProfileSchema:
        """Apply an ``UpdateProfileSchema`` body in one transaction and return the new schema.

        Raises:
            NotFoundError: No schema with this id, or an operation's attribute id is unknown.
            ValueError: An operation is invalid (see :func:`apply_operations`).
        """
        with self.store.transaction() as conn:
            row = conn.execute(
                select(profile_schemas.c.body).where(profile_schemas.c.id == schema_id)
            ).first()
            if row is None:
                raise NotFoundError(f"profile schema {schema_id!r} not found")
            schema = apply_operations(
                _with_ids(ProfileSchema.model_validate_json(row.body), schema_id), update
            )
            body = json.dumps(schema.model_dump(), ensure_ascii=False)
            conn.execute(profile_schemas.update().where(profile_schemas.c.id == schema_id).values(body=body))
        return schema

    def delete(self, schema_id: str) -> bool:
        """Delete a schema; return whether it existed (users' variables it added stay theirs)."""
        with self.store.transaction() as conn:
            result = conn.execute(delete(profile_schemas).where(profile_schemas.c.id == schema_id))
        return bool(result.rowcount)
