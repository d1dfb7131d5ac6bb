"""A PostgreSQL outage under proxy load: every turn answered 200 is stored after recovery.

Issue 21's done-when: "A PostgreSQL outage of 20 s under 10 proxy requests/s: every turn answered
200 is stored within 60 s of recovery; ``/healthz`` reports the outage." The script

1. makes a PostgreSQL cluster of its own (``initdb`` + ``pg_ctl`` in a temporary directory, on a free
   loopback port, as the ``postgres`` user when run as root; the shared server is never touched),
2. starts ``convmem serve`` on it (a subprocess, spool in the temporary directory) in front of a
   fake OpenAI-compatible upstream on 127.0.0.1,
3. sends ``--rate`` chat completions a second (streamed and not, five memories) and polls
   ``/healthz`` four times a second,
4. after ``--warmup`` seconds stops the cluster (``pg_ctl stop -m fast``) for ``--outage`` seconds,
   starts it again and keeps sending for ``--after`` seconds,
5. waits until every user turn answered 200 is in ``cm_messages`` (at most ``--drain-limit``
   seconds after the recovery), then removes the cluster and prints the figures as JSON.

Run: ``python benchmarks/pg_outage.py`` (about a minute). Exit status 1 when a turn answered 200
was not stored in time or ``/healthz`` never reported the outage; 2 when ``initdb``/``pg_ctl`` are
missing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.chat_upstream import ChatUpstream  # noqa: E402

UPSTREAM_KEY = "sk-outage-upstream"
MEMORIES = 5
#: Longest wait for one proxy answer (an answer never waits for the store, so this is generous).
_REQUEST_TIMEOUT_S = 30.0


class ClusterUnavailable(RuntimeError):
    """``initdb``/``pg_ctl`` (or the ``postgres`` user, when run as root) are missing: no cluster."""


def _pg_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A PostgreSQL cluster of our own in a temporary directory; see :func:`own_cluster`."""

    root: Path
    port: int
    pg_ctl: str
    as_user: list[str]

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        data = str(self.root / "data")
        subprocess.run(
            [*self.as_user, self.pg_ctl, "-D", data, *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._ctl("-w", "-t", "90", "-l", str(self.root / "server.log"), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-w", "-t", "90", "-m", mode, "stop")

    def running(self) -> bool:
        data = self.root / "data"
        return (data / "postmaster.pid").exists()


@contextmanager
def own_cluster(port: int | None = None) -> Iterator[Cluster]:
    """Create, start and finally remove a cluster of our own (never the shared server).

    Raises:
        ClusterUnavailable: ``initdb`` or ``pg_ctl`` is missing, or the process runs as root and
            there is no ``postgres`` user to run them as (PostgreSQL refuses root).
    """
    initdb, pg_ctl = _pg_binary("initdb"), _pg_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise ClusterUnavailable("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="convmem-pg-outage-"))
    try:
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            try:
                import pwd

                owner = pwd.getpwnam("postgres")
            except KeyError:
                owner = None
            if runuser is None or owner is None:
                raise ClusterUnavailable("running as root without a postgres user (or runuser) for initdb")
            os.chown(root, owner.pw_uid, owner.pw_gid)
            as_user = [runuser, "-u", "postgres", "--"]
        subprocess.run(
            [*as_user, initdb, "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
            + ["--no-sync"],
            check=True,
            capture_output=True,
            timeout=180,
        )
        cluster = Cluster(root, port or free_port(), pg_ctl, as_user)
        cluster.start()
        try:
            yield cluster
        finally:
            if cluster.running():
                try:
                    cluster.stop("immediate")
                except subprocess.SubprocessError:
                    pass
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _convmem_serve(url: str, upstream: str, spool: Path, log: Path) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVMEM_")}
    env.update(
        PYTHONPATH=str(ROOT),
        CONVMEM_UPSTREAM_URL=upstream,
        CONVMEM_UPSTREAM_API_KEY=UPSTREAM_KEY,
        CONVMEM_PROXY_SPOOL_DIR=str(spool),
    )
    # Its log (a warning per request that meets the outage) goes to a file, not the caller's output.
    log_file = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "convmem_graph", "serve", "--db", url, "--port", str(port)]
        + ["--log-level", "error"],
        cwd=ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("convmem serve did not start within 90 s")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log_file.close()


def _text(i: int) -> str:
    return f"outage turn {i}: 我今天去了第{i}个地方。"


class _Load:
    """``rate`` proxy requests a second, each on a thread of its own, until :meth:`stop`."""

    def __init__(self, base: str, rate: float) -> None:
        self.base = base
        self.rate = rate
        self.results: list[tuple[int, int, float, float]] = []  # i, status, sent (monotonic), seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pacer = threading.Thread(target=self._run, name="outage-load", daemon=True)

    def start(self) -> None:
        self._pacer.start()

    def _one(self, client: httpx.Client, i: int) -> None:
        body = {
            "model": "m",
            "user": f"outage_{i % MEMORIES}",
            "stream": i % 2 == 0,
            "messages": [{"role": "user", "content": _text(i)}],
        }
        sent = time.monotonic()
        try:
            answer = client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": f"outage-{i}"})
            _ = answer.content
            status = answer.status_code
        except httpx.HTTPError:
            status = 0
        with self._lock:
            self.results.append((i, status, sent, time.monotonic() - sent))

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=_REQUEST_TIMEOUT_S) as client:
            start = time.monotonic()
            i = 0
            while not self._stop.is_set():
                thread = threading.Thread(target=self._one, args=(client, i), daemon=True)
                thread.start()
                self._threads.append(thread)
                i += 1
                self._stop.wait(max(0.0, start + i / self.rate - time.monotonic()))
            for thread in self._threads:
                thread.join(_REQUEST_TIMEOUT_S + 5)

    def stop(self) -> None:
        self._stop.set()
        self._pacer.join(_REQUEST_TIMEOUT_S + 10)


class _Health:
    """Polls ``/healthz`` every ``every_s`` until :meth:`stop`; keeps (monotonic, status, seconds)."""

    def __init__(self, base: str, every_s: float = 0.25) -> None:
        self.base = base
        self.every_s = every_s
        self.results: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outage-health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=10) as client:
            while not self._stop.wait(self.every_s):
                sent = time.monotonic()
                try:
                    status = client.get("/healthz").status_code
                except httpx.HTTPError:
                    status = 0
                self.results.append((sent, status, time.monotonic() - sent))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def _stored_turns(url: str) -> set[str]:
    """User texts of the outage memories in ``cm_messages`` (an empty set while unreachable)."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            rows = conn.execute(
                "SELECT content FROM cm_messages WHERE role = 'user' AND memory_id LIKE 'outage_%'"
            ).fetchall()
    except psycopg.Error:
        return set()
    return {str(r[0]) for r in rows}


def run(
    *,
    rate: float = 10.0,
    warmup_s: float = 5.0,
    outage_s: float = 20.0,
    after_s: float = 5.0,
    drain_limit_s: float = 60.0,
    stop_mode: str = "fast",
) -> dict[str, Any]:
    """Run the outage once and return its figures (see the module docstring).

    Raises:
        ClusterUnavailable: No cluster of our own can be made here.
    """
    with own_cluster() as cluster, ChatUpstream(key=UPSTREAM_KEY, lifetime_s=600) as upstream:
        spool = cluster.root / "spool"
        serve_log = cluster.root / "serve.log"
        with _convmem_serve(cluster.url, upstream.url, spool, serve_log) as base:
            load, health = _Load(base, rate), _Health(base)
            health.start()
            load.start()
            time.sleep(warmup_s)
            down_at = time.monotonic()
            cluster.stop(stop_mode)
            down_done = time.monotonic()
            time.sleep(max(0.0, outage_s - (down_done - down_at)))
            up_at = time.monotonic()
            cluster.start()
            recovered = time.monotonic()
            time.sleep(after_s)
            load.stop()
            answered = {i for i, status, _, _ in load.results if status == 200}
            expected = {_text(i) for i in answered}
            stored: set[str] = set()
            drained_at: float | None = None
            while time.monotonic() < recovered + drain_limit_s:
                stored = _stored_turns(cluster.url)
                if expected <= stored:
                    drained_at = time.monotonic()
                    break
                time.sleep(0.5)
            health.stop()
        # Kept only when a turn is missing: the server's own account of it (the directory goes).
        log_tail = serve_log.read_text("utf-8", "replace").splitlines()[-40:] if expected - stored else []
    statuses: dict[str, int] = {}
    for _, status, _, _ in load.results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    during = [(status, s) for t, status, s in health.results if down_done + 1.0 <= t <= up_at]
    before = [(status, s) for t, status, s in health.results if t < down_at]
    return {
        "rate_per_s": rate,
        "outage_s": round(recovered - down_at, 1),
        "stop_mode": stop_mode,
        "requests": len(load.results),
        "statuses": statuses,
        "answered_200": len(answered),
        "answered_200_during_outage": sum(
            1 for i, status, sent, _ in load.results if status == 200 and down_at <= sent <= recovered
        ),
        "stored": len(expected & stored),
        "lost": len(expected - stored),
        "drain_s_after_recovery": None if drained_at is None else round(drained_at - recovered, 1),
        "max_request_s": round(max((s for _, _, _, s in load.results), default=0.0), 2),
        "healthz_before": {"n": len(before), "non_200": sum(1 for st, _ in before if st != 200)},
        "healthz_during_outage": {
            "n": len(during),
            "503": sum(1 for st, _ in during if st == 503),
            "max_s": round(max((s for _, s in during), default=0.0), 2),
        },
        "serve_log_tail": log_tail,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the outage and print its figures as JSON (exit 1 when a turn was lost)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10.0, help="proxy requests a second")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before the outage")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the cluster is down")
    parser.add_argument("--after", type=float, default=5.0, help="seconds of load after the recovery")
    parser.add_argument("--drain-limit", type=float, default=60.0, help="longest wait for the turns")
    parser.add_argument("--stop-mode", choices=["smart", "fast", "immediate"], default="fast")
    args = parser.parse_args(argv)
    try:
        figures = run(
            rate=args.rate,
            warmup_s=args.warmup,
            outage_s=args.outage,
            after_s=args.after,
            drain_limit_s=args.drain_limit,
            stop_mode=args.stop_mode,
        )
    except ClusterUnavailable as exc:
        print(f"no PostgreSQL cluster of our own: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(figures, indent=2))
    ok = figures["lost"] == 0 and figures["drain_s_after_recovery"] is not None
    return 0 if ok and figures["healthz_during_outage"]["503"] > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
