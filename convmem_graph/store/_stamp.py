"""The schema stamp, importable without SQLAlchemy (the call-start reader checks it too)."""

from __future__ import annotations

__all__ = ["SCHEMA_STAMP"]

#: A digest of the tables, columns, indexes and open-time steps this version expects
#: (:func:`convmem_graph.store.migrations.schema_digest`); a SQLite file set up by this version
#: carries it as ``PRAGMA user_version``. A unit test fails when the tables change and this is not
#: updated, and prints the new value.
SCHEMA_STAMP = 802030163
