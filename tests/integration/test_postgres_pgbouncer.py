"""Behind PgBouncer in transaction mode: two processes on one memory, first setup included.

A PgBouncer (``pool_mode = transaction``, 3 server connections) is started on 127.0.0.1 in front of
the test server, on a fresh schema, so the checkpoint tables' first setup also goes through it.
Skipped (with the reason) when the ``pgbouncer`` program is not installed (Debian: ``apt-get install
pgbouncer``; ``.ci/run`` installs it); it fails, like every PostgreSQL test, when
``CONVMEM_TEST_POSTGRES_URL`` is set but the server is unreachable.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from convmem_graph.store.urls import libpq_url
from tests.backends import with_search_path
from tests.integration.test_postgres_pools import check_no_interleaving, memory_lock_holders, run_two_workers

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

_PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def bouncer(pg_base_url: str) -> Iterator[tuple[str, str]]:
    """(URL through PgBouncer, direct URL), both on one fresh schema."""
    if _PGBOUNCER is None:
        pytest.skip("pgbouncer is not installed: the transaction-mode pooler test needs it")
    schema = f"cm_bouncer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq_url(pg_base_url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    server = make_url(pg_base_url)
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="convmem-pgbouncer-"))
    folder.chmod(0o755)  # PgBouncer drops root privileges before it reads its files again
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"bouncer = host={server.host or '127.0.0.1'} port={server.port or 5432} "
        f"dbname={server.database} user={server.username or 'postgres'} "
        f"connect_query='SET search_path TO {schema}'\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nauth_type = any\n"
        "pool_mode = transaction\ndefault_pool_size = 3\nmax_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits,options\nunix_socket_dir =\n",
        encoding="utf-8",
    )
    ini.chmod(0o644)
    command = [_PGBOUNCER, *(["-u", "postgres"] if os.geteuid() == 0 else []), str(ini)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"postgresql://{server.username or 'postgres'}@127.0.0.1:{port}/bouncer"
    try:
        for _ in range(100):  # bounded: 10 s
            try:
                psycopg.connect(libpq_url(url), connect_timeout=1).close()
                break
            except psycopg.Error:
                if proc.poll() is not None:
                    pytest.fail(f"pgbouncer did not start: {proc.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
                time.sleep(0.1)
        else:
            pytest.fail("pgbouncer did not accept connections within 10 s")
        yield url, with_search_path(pg_base_url, schema)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
        with psycopg.connect(libpq_url(pg_base_url), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_two_processes_behind_pgbouncer_transaction_mode_never_interleave(
    bouncer: tuple[str, str], tmp_path: Path
) -> None:
    url, direct = bouncer
    memory_id = f"bounced-{uuid.uuid4().hex[:8]}"
    # PgBouncer 1.18 cannot follow server-side prepared statements in transaction mode.
    env = {**os.environ, "CONVMEM_PG_PREPARE_THRESHOLD": "none"}
    spans = run_two_workers(url, memory_id, tmp_path, env=env)
    check_no_interleaving(direct, memory_id, spans)
    with psycopg.connect(libpq_url(direct)) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
        }
    assert {"cm_memories", "checkpoints", "checkpoint_migrations"} <= tables  # set up through PgBouncer
    assert memory_lock_holders(direct, memory_id) == []  # no lock outlived its transaction
