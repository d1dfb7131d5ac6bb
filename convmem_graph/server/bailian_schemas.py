"""Bailian profile schemas, kept in a table of their own beside the store, mapped onto variables.

A Bailian profile schema (``CreateProfileSchema``) is a named list of attributes that applies to
every user of a workspace; a convmem variable schema belongs to one memory. A schema is therefore
stored once here (table ``cm_bailian_profile_schemas``, declared in the store's registry and
created by its migrations) and, when ``AddMemory`` names it, its attributes are added to that user's variable
schema. Attribute names map to variable names: a label of the default schema (``城市``, ``City``)
is that variable (``city``); another identifier-like name is kept; any other name becomes
``attr_<digest>``.

Example:
    >>> variable_name("城市"), variable_name("favourite_team"), variable_name("口味偏好")
    ('city', 'favourite_team', 'attr_998fdb01')
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from convmem_graph._time import now_ms
from convmem_graph.errors import NotFoundError
from convmem_graph.payloads.memory_block import VARIABLE_LABELS
from convmem_graph.store import MemoryStore
from convmem_graph.store.registry import profile_schemas

__all__ = ["ProfileAttribute", "ProfileSchema", "ProfileSchemaStore", "variable_name"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class ProfileAttribute(BaseModel):
    """One attribute of a profile schema (a user-profile field)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=64)
    description: str = Field(default="", max_length=500)


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


class ProfileSchemaStore:
    """Profile schemas in the store's database.

    Args:
        store: The memory store whose database holds the table.
    """

    def __init__(self, store: MemoryStore) -> None:
        # The table is the store's (created by its migrations when it opened).
        self.store = store

    def create(self, schema: ProfileSchema) -> str:
        """Store a schema and return its new id (``ps_`` + 24 hex digits)."""
        schema_id = f"ps_{secrets.token_hex(12)}"
        body = json.dumps(schema.model_dump(), ensure_ascii=False)
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
        return ProfileSchema.model_validate_json(row.body)
