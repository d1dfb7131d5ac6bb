"""Database URL handling shared by the store and the checkpointer factories.

One rule everywhere: no URL means the SQLite file ``convmem.db`` in the current directory, a bare
filesystem path means a SQLite file, and ``postgresql://`` means PostgreSQL through psycopg 3.
Passwords never leave this module unmasked except in the URL handed to the driver.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# SQLAlchemy is imported inside the functions that parse URLs: a call start that reads a plain
# file read-only (plain_sqlite_file) never imports it.
if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = [
    "DEFAULT_DB_FILE",
    "is_memory_sqlite",
    "libpq_url",
    "mask_url",
    "normalize_url",
    "plain_sqlite_file",
    "sqlite_file",
    "sqlite_path",
]

#: File name of the default database (store and checkpoints), created in the current directory.
DEFAULT_DB_FILE = "convmem.db"


def normalize_url(url: str | None) -> str:
    """Return the SQLAlchemy URL to open for a user-given database location.

    Args:
        url: ``None`` (the default file), a bare filesystem path, ``:memory:``, a ``sqlite:`` URL,
            or a ``postgresql://`` / ``postgres://`` URL (rewritten to the psycopg 3 driver).

    Returns:
        A SQLAlchemy URL string, with relative SQLite paths made absolute so a later ``chdir``
        does not move the database.

    Raises:
        ValueError: If the URL is empty or names an unsupported database.

    Example:
        >>> normalize_url("postgresql://u:pw@db:5432/app")
        'postgresql+psycopg://u:pw@db:5432/app'
        >>> normalize_url(":memory:")
        'sqlite://'
    """
    from sqlalchemy.engine import make_url

    if url is None:
        return _sqlite_file_url(DEFAULT_DB_FILE)
    text = url.strip()
    if not text:
        raise ValueError("database url is empty")
    if text == ":memory:":
        return "sqlite://"
    if "://" not in text:
        return _sqlite_file_url(text)
    parsed = make_url(text)
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        return parsed.render_as_string(hide_password=False)
    if backend == "sqlite":
        database = parsed.database
        if not database or database == ":memory:":
            return "sqlite://"
        if not database.startswith("file:"):
            parsed = parsed.set(database=os.path.abspath(database))
        return parsed.render_as_string(hide_password=False)
    raise ValueError(f"unsupported database url scheme {parsed.drivername!r}: use sqlite or postgresql")


def mask_url(url: str | URL) -> str:
    """Return ``url`` with its password replaced by ``***`` (safe for logs and reprs).

    Example:
        >>> mask_url("postgresql+psycopg://u:secret@db/app")
        'postgresql+psycopg://u:***@db/app'
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url) if isinstance(url, str) else url
    return parsed.render_as_string(hide_password=True)


def is_memory_sqlite(url: str) -> bool:
    """Tell whether a normalized URL is an in-memory SQLite database."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    return database in ("", ":memory:") or "mode=memory" in database


def sqlite_path(url: str | None) -> str:
    """Return the filesystem path (or ``:memory:``) of a SQLite location given like the store's URL.

    Raises:
        ValueError: If the location is not SQLite.
    """
    from sqlalchemy.engine import make_url

    normalized = normalize_url(url)
    parsed = make_url(normalized)
    if parsed.get_backend_name() != "sqlite":
        raise ValueError(f"not a sqlite url: {mask_url(parsed)}")
    if is_memory_sqlite(normalized):
        return ":memory:"
    return parsed.database or ":memory:"


def libpq_url(url: str) -> str:
    """Return a ``postgresql://`` conninfo URL (driver suffix removed) for psycopg and libpq.

    Raises:
        ValueError: If the URL is not PostgreSQL.
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"not a postgresql url: {mask_url(parsed)}")
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def _sqlite_file_url(path: str) -> str:
    from sqlalchemy.engine import URL

    return URL.create("sqlite", database=os.path.abspath(os.path.expanduser(path))).render_as_string(
        hide_password=False
    )


def plain_sqlite_file(db: str | None) -> str | None:
    """The file a location given as a plain path names (None for URLs and ``:memory:``).

    The same rule as :func:`normalize_url`, without importing SQLAlchemy: a call start that
    reads a file read-only needs no URL parsing. A ``sqlite:`` or server URL gives None.

    Example:
        >>> plain_sqlite_file("postgresql://db/app") is None, plain_sqlite_file("/data/m.db")
        (True, '/data/m.db')
    """
    text = DEFAULT_DB_FILE if db is None else db.strip()
    if not text or text == ":memory:" or "://" in text:
        return None
    return os.path.abspath(os.path.expanduser(text))


#: Schemes of a SQLite URL whose file the standard library's driver can open (pysqlite is it).
_SQLITE_SCHEMES = ("sqlite://", "sqlite+pysqlite://")


def sqlite_file(db: str | None) -> str | None:
    """The file a plain path or a plain ``sqlite:///`` URL names, parsed without SQLAlchemy.

    What :func:`sqlite_path` gives for the same location (a unit test compares them), or None
    for anything else: server URLs, ``:memory:``, and SQLite URLs with options (a query string,
    a host, ``file:`` URIs), which only the full store interprets.

    Example:
        >>> sqlite_file("sqlite:////data/m.db"), sqlite_file("sqlite:///m.db?mode=ro") is None
        ('/data/m.db', True)
    """
    text = DEFAULT_DB_FILE if db is None else db.strip()
    scheme = next((s for s in _SQLITE_SCHEMES if text.startswith(s)), None)
    if scheme is None:
        return plain_sqlite_file(db)
    rest = text[len(scheme) :]
    if not rest.startswith("/") or "?" in rest or "#" in rest:
        return None
    from urllib.parse import unquote

    database = unquote(rest[1:])
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return os.path.abspath(database)
