"""A throwaway PostgreSQL schema for a benchmark: created fresh, dropped at the end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def schema_url(url: str, schema: str) -> str:
    """``url`` whose sessions use ``schema`` first (libpq ``options``)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    options = f"-csearch_path={schema}"
    if "options" in parsed.query:
        options = f"{parsed.query['options']} {options}"
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


@contextmanager
def scratch_schema(url: str, prefix: str = "cm_bench") -> Iterator[str]:
    """Yield a URL of ``url``'s database whose tables go to a new schema, dropped afterwards."""
    import psycopg

    from convmem_graph.store.urls import libpq_url

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema_url(url, schema)
    finally:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


class BackendCpu:
    """CPU seconds of the PostgreSQL server processes serving one database, sampled from ``/proc``.

    A backend's title names its database (``postgres: user db host ...``), so a benchmark on a
    database of its own can tell its backends from other users' of a shared server. Each backend's
    ``utime + stime`` is sampled every ``interval`` seconds while it lives; the last sample is what
    it counts, so up to ``interval`` of a backend's final work can be missed (a lower bound). The
    server's shared processes (WAL writer, checkpointer, autovacuum) are not counted. Linux only.

    Example:
        >>> with BackendCpu("convmem_bench") as cpu:  # doctest: +SKIP
        ...     run_the_replay()
        >>> cpu.seconds  # doctest: +SKIP
    """

    def __init__(self, database: str, interval: float = 0.02) -> None:
        import os
        import threading

        self.database = database
        self.interval = interval
        self._ticks: dict[tuple[int, int], int] = {}
        self._hz = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> BackendCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        """CPU seconds of the database's backends seen so far."""
        return sum(self._ticks.values()) / self._hz

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        import os

        marker = f" {self.database} ".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    title = fh.read()
                if not title.startswith(b"postgres: ") or marker not in title:
                    continue
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:  # the process ended between listing and reading
                continue
            # Fields after the command: state is [0]; utime [11], stime [12]; start time [19]
            # tells a reused pid from the backend that had it before.
            key = (int(name), int(fields[19]))
            self._ticks[key] = max(self._ticks.get(key, 0), int(fields[11]) + int(fields[12]))
