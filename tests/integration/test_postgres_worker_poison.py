"""One poison never stops the serve worker's queue on a real PostgreSQL (issue 21 item 2).

PostgreSQL refuses what SQLite stores: NUL in text ("unsupported Unicode escape sequence" in JSON,
"invalid byte sequence" in text) and a 300-character id in a ``varchar(256)``. Before, the worker
retried such a batch every second forever and every other memory's deliveries stayed pending. Now
the poison goes to dead letters with its reason; the 100 good deliveries for 10 memories are
stored; nothing stays pending, also after a restart. The worker runs in-process (as
``convmem serve`` does by default) and once in its child process (``worker_process``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed (pip install -e '.[server]')")

from convmem_graph.server.inbox import Inbox  # noqa: E402
from convmem_graph.server.worker_process import WorkerProcess  # noqa: E402
from tests.unit.server.test_worker_poison import (  # noqa: E402
    PER_MEMORY,
    PROXY_MEMORIES,
    TRTC_USERS,
    add_good,
    long_user_poison,
    nul_proxy_poison,
    open_memory,
    run_poison_scenario,
    serve_settings,
    stored_counts,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.mark.parametrize("poison", [nul_proxy_poison, long_user_poison], ids=["nul-text", "long-user-id"])
def test_a_poison_among_100_deliveries_goes_to_dead_letters_on_postgres(
    fresh_pg_url: str, poison: Callable[[Inbox], None]
) -> None:
    run_poison_scenario(fresh_pg_url, poison, must_dead_letter=True)
    with open_memory(fresh_pg_url) as mem:
        reasons = [letter.error for letter in mem.store.list_dead_letters()]
    assert len(reasons) == 2, reasons
    if poison is long_user_poison:
        assert all("256" in r or "255" in r for r in reasons), reasons
    else:
        assert all("0000" in r or "NUL" in r or "0x00" in r for r in reasons), reasons


def test_the_worker_process_isolates_a_poison_on_postgres(fresh_pg_url: str) -> None:
    settings = serve_settings(fresh_pg_url, worker_process=True)
    with open_memory(fresh_pg_url) as mem:
        inbox = Inbox(mem.store)
        add_good(inbox, range(PER_MEMORY), lambda: (nul_proxy_poison(inbox), long_user_poison(inbox)))
        worker = WorkerProcess(inbox, settings)
        worker.start()
        try:
            assert worker.wait_idle(30), inbox.counts()
        finally:
            worker.stop(timeout=10)
        assert stored_counts(mem) == dict.fromkeys(PROXY_MEMORIES + TRTC_USERS, PER_MEMORY)
        assert len(mem.store.list_dead_letters()) == 2
        assert inbox.counts() == {"done": 100, "failed": 2}
