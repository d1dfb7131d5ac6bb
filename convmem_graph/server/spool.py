"""The proxy's turn spool: finished turns the inbox could not take are kept on disk until it can.

The proxy answers the caller before its turn is stored; when :meth:`Inbox.add` then fails (a
PostgreSQL outage, a lock past the bounded wait) the turn is appended to a spool file instead of
being dropped. A background :class:`SpoolFlusher` moves spooled turns into the inbox with the same
inbox key, so a retry that did reach the database before is not stored twice, and deletes them
only after the inbox committed them. At start-up the spool is flushed first, so turns spooled by
a process that died are stored by the next one.

Layout: one append-only JSON-lines file per process (``turns-<pid>-<random>.jsonl``) in the spool
directory, each line fsynced before :meth:`TurnSpool.append` returns. A process holds an exclusive
``flock`` on each of its files while it has them open, so another process flushes a file only when
its owner is gone. A line that is not a spooled turn (a torn write, a hand edit) is moved to
``quarantine.jsonl`` in the same directory and the rest of its file is stored: one bad line never
stops the spool. The directory and files are private to the user (modes 0700 / 0600): they hold
turn text, like the database.

Example:
    >>> import tempfile
    >>> spool = TurnSpool(Path(tempfile.mkdtemp()))
    >>> spool.append(SpooledTurn(vendor="proxy", key="proxy:k1", body="{}", memory_id="u_1"))
    >>> stored = []
    >>> spool.flush(lambda turn: stored.append(turn.key) or True).stored
    1
    >>> stored, spool.pending
    (['proxy:k1'], 0)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process claim, own files only
    fcntl = None  # type: ignore[assignment]

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from convmem_graph._time import now_ms
from convmem_graph.store.urls import is_memory_sqlite, mask_url, normalize_url, sqlite_path
from convmem_graph.store.write_gate import WriteTimeout

__all__ = [
    "QUARANTINE_NAME",
    "FlushResult",
    "SpoolFlusher",
    "SpooledTurn",
    "TurnSpool",
    "default_spool_dir",
    "is_transient",
]

logger = logging.getLogger(__name__)

#: Where lines that are not spooled turns go (appended, fsynced), in the spool directory.
QUARANTINE_NAME = "quarantine.jsonl"
_PREFIX = "turns-"
_SUFFIX = ".jsonl"
_FORMAT = 1
#: Longest wait between failing passes: short enough that turns follow a recovery within seconds
#: (a 30 s cap left them spooled for up to 30 s after the database was back), long enough that a
#: down database sees one attempt per pass, not one per spooled turn.
_MAX_BACKOFF_S = 5.0


def default_spool_dir(db: str) -> Path:
    """Return the spool directory used when ``CONVMEM_PROXY_SPOOL_DIR`` is not set.

    A SQLite file: ``<file>.proxy-spool`` next to it (the turns stay with their database). An
    in-memory SQLite database: a fresh private temporary directory (the database does not outlive
    the process, so neither need its turns, and no other process may flush into it). Any other
    database (PostgreSQL): ``$XDG_STATE_HOME/convmem/proxy-spool/<hash of the URL>`` (default
    ``~/.local/state``), one directory per database, so two servers on two databases never move
    each other's turns. The directory is made only when a first turn is spooled.

    Example:
        >>> str(default_spool_dir("/srv/convmem.db"))
        '/srv/convmem.db.proxy-spool'
    """
    url = normalize_url(db)
    if url.startswith("sqlite"):
        if is_memory_sqlite(url):
            # A fresh name, made only when a turn is spooled (most in-memory servers never spool).
            return Path(tempfile.gettempdir()) / f"convmem-proxy-spool-{os.getpid()}-{secrets.token_hex(8)}"
        return Path(sqlite_path(url) + ".proxy-spool")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    # The masked URL names host, port and database but no password: the same directory whatever
    # the credentials, and the hash keeps the URL itself out of the path.
    digest = hashlib.sha256(mask_url(url).encode("utf-8")).hexdigest()[:16]
    return Path(state) / "convmem" / "proxy-spool" / digest


@dataclass(frozen=True, slots=True)
class SpooledTurn:
    """One inbox row waiting in the spool: the arguments of :meth:`Inbox.add`."""

    vendor: str
    key: str
    body: str
    memory_id: str | None = None
    spooled_ms: int = field(default_factory=now_ms)

    def to_line(self) -> bytes:
        """The JSON line stored for this turn (UTF-8, newline-terminated)."""
        doc = {
            "v": _FORMAT,
            "vendor": self.vendor,
            "key": self.key,
            "memory_id": self.memory_id,
            "body": self.body,
            "spooled_ms": self.spooled_ms,
        }
        return (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def from_line(cls, line: bytes) -> SpooledTurn:
        """Parse one spool line.

        Raises:
            ValueError: The line is not a spooled turn of this format.
        """
        doc: Any = json.loads(line.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("v") != _FORMAT:
            raise ValueError("not a spooled turn")
        vendor, key, body = doc.get("vendor"), doc.get("key"), doc.get("body")
        memory_id = doc.get("memory_id")
        spooled = doc.get("spooled_ms")
        if not (isinstance(vendor, str) and isinstance(key, str) and key and isinstance(body, str)):
            raise ValueError("a spooled turn needs vendor, key and body")
        if memory_id is not None and not isinstance(memory_id, str):
            raise ValueError("memory_id must be a string")
        if not isinstance(spooled, int) or isinstance(spooled, bool):
            raise ValueError("spooled_ms must be an integer")
        return cls(vendor=vendor, key=key, body=body, memory_id=memory_id, spooled_ms=spooled)


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What one :meth:`TurnSpool.flush` pass did."""

    stored: int = 0
    duplicates: int = 0
    quarantined: int = 0
    left: int = 0
    error: str | None = None


class _File:
    """One spool file held open by this process, under its exclusive ``flock``."""

    def __init__(self, path: Path, handle: IO[bytes], lines: int = 0) -> None:
        self.path = path
        self.handle = handle
        self.lines = lines

    def remove(self) -> None:
        """Unlink, then close (which releases the lock): a waiting claimant sees no file."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        self.handle.close()


def is_transient(exc: BaseException) -> bool:
    """Whether a failed :meth:`Inbox.add` may succeed later: an outage, a lock, a full disk.

    Anything else (a value the database refuses) is a poison turn: quarantined, not retried.
    """
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(
        exc, (OperationalError, InterfaceError, PoolTimeout, WriteTimeout, OSError, TimeoutError)
    )


def _lock(handle: IO[bytes]) -> bool:
    """Take the exclusive lock of a spool file without waiting; ``False`` when another holds it."""
    if fcntl is None:  # pragma: no cover - Windows
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _fsync_dir(directory: Path) -> None:
    """Make a created or removed file name durable (the file's own fsync does not cover it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


class TurnSpool:
    """The spool files of one directory, as seen by this process.

    Args:
        directory: Where the spool files are (created with the first spooled turn, mode 0700).
        max_per_pass: Most turns one :meth:`flush` moves, so a pass stays short.
        max_turns: Spooled turns at which :attr:`full` says so (``None``: never full). The spool
            itself never refuses a turn: a turn reaching :meth:`append` was answered already, so
            the caller checks :attr:`full` before it answers (the proxy: before the upstream call).
    """

    def __init__(self, directory: Path, *, max_per_pass: int = 2000, max_turns: int | None = None) -> None:
        self.directory = directory
        self.max_per_pass = max_per_pass
        self.max_turns = max_turns
        self._lock = threading.Lock()  # guards _active and _sealed
        self._flushing = threading.Lock()  # one flush pass at a time
        self._active: _File | None = None
        # Files this process wrote and then closed for appends: flushed, then removed.
        self._sealed: list[_File] = []

    @property
    def pending(self) -> int:
        """Turns this process spooled and has not moved into the inbox yet."""
        with self._lock:
            active = self._active.lines if self._active is not None else 0
            return active + sum(f.lines for f in self._sealed)

    @property
    def full(self) -> bool:
        """Whether this process holds ``max_turns`` spooled turns or more (new turns should wait).

        Example:
            >>> import tempfile
            >>> spool = TurnSpool(Path(tempfile.mkdtemp()), max_turns=1)
            >>> spool.full
            False
            >>> spool.append(SpooledTurn(vendor="proxy", key="proxy:k1", body="{}"))
            >>> spool.full
            True
        """
        return self.max_turns is not None and self.pending >= self.max_turns

    def append(self, turn: SpooledTurn) -> None:
        """Append ``turn`` to this process's spool file and fsync it before returning.

        Raises:
            OSError: The turn could not be written (disk full, directory gone).
        """
        line = turn.to_line()
        with self._lock:
            active = self._active or self._open_new()
            active.handle.write(line)
            active.handle.flush()
            os.fsync(active.handle.fileno())
            active.lines += 1

    def _open_new(self) -> _File:
        name = f"{_PREFIX}{os.getpid()}-{secrets.token_hex(4)}{_SUFFIX}"
        # Made on the first spooled turn, not at start-up: a server that never spools leaves no directory.
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        handle = os.fdopen(fd, "a+b")  # read back by flush, appended to only
        _lock(handle)  # a new name: nobody else can hold it
        _fsync_dir(self.directory)
        self._active = _File(path, handle)
        return self._active

    def _claim_foreign(self) -> list[_File]:
        """Open and lock the spool files of processes that are gone (their lock is free)."""
        own = {f.path for f in self._sealed}
        if self._active is not None:
            own.add(self._active.path)
        claimed: list[_File] = []
        if not self.directory.is_dir():
            return claimed
        for path in sorted(self.directory.glob(f"{_PREFIX}*{_SUFFIX}")):
            if path in own:
                continue
            try:
                handle = path.open("r+b")
            except FileNotFoundError:
                continue  # flushed and removed by its owner meanwhile
            if not _lock(handle):
                handle.close()  # its process is alive and flushes it itself
                continue
            if os.fstat(handle.fileno()).st_nlink == 0:
                handle.close()  # removed after we opened it: already stored
                continue
            claimed.append(_File(path, handle))
        return claimed

    def flush(self, add: Callable[[SpooledTurn], bool]) -> FlushResult:
        """Move spooled turns into the inbox through ``add`` (``False``: the key was stored before).

        Files are taken whole, oldest name first: this process's own (the one being appended to is
        closed for appends first, so turns keep their order), then those left by processes that
        are gone. A file is removed only after every turn in it was committed by ``add``; a failing
        ``add`` ends the pass and leaves the rest for the next one (turns of that file already
        stored are offered again then, and ``add`` finds their key).
        """
        with self._flushing:
            with self._lock:
                if self._active is not None and self._active.lines:
                    self._sealed.append(self._active)
                    self._active = None
                own = list(self._sealed)
            files = own + self._claim_foreign()
            stored = duplicates = quarantined = moved = 0
            error: str | None = None
            try:
                for spool_file in files:
                    if moved >= self.max_per_pass or error is not None:
                        break
                    spool_file.handle.seek(0)
                    bad: list[bytes] = []
                    count = 0
                    for raw in spool_file.handle.read().splitlines():
                        if not raw.strip():
                            continue
                        try:
                            turn = SpooledTurn.from_line(raw)
                        except (ValueError, UnicodeDecodeError, RecursionError):
                            bad.append(raw)
                            continue
                        try:
                            if add(turn):
                                stored += 1
                            else:
                                duplicates += 1
                        except Exception as exc:  # noqa: BLE001 - sorted below: outage or poison
                            if is_transient(exc):
                                error = type(exc).__name__  # still down: this file waits for the next pass
                                break
                            # A turn the database refuses for what it is would block the spool forever.
                            bad.append(raw)
                            continue
                        count += 1
                    moved += count
                    if error is not None:
                        break
                    if bad:
                        self._quarantine(spool_file.path.name, bad)
                        quarantined += len(bad)
                    with self._lock:
                        if spool_file in self._sealed:
                            self._sealed.remove(spool_file)
                    spool_file.remove()
                    _fsync_dir(self.directory)
            finally:
                # Foreign files not finished this pass are unlocked for the next one (or another process).
                for spool_file in files:
                    if spool_file not in own and not spool_file.handle.closed:
                        spool_file.handle.close()
            left = self.pending
        if stored or quarantined or error:
            logger.info(
                "proxy spool: %d turns stored, %d already stored, %d lines quarantined, %d left%s",
                stored,
                duplicates,
                quarantined,
                left,
                f" (inbox: {error})" if error else "",
            )
        return FlushResult(stored, duplicates, quarantined, left, error)

    def _quarantine(self, source: str, lines: list[bytes]) -> None:
        """Keep unreadable lines for a human, with the file they came from (never logged: turn text)."""
        path = self.directory / QUARANTINE_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as handle:
            for raw in lines:
                doc = {"file": source, "quarantined_ms": now_ms(), "line": raw.decode("utf-8", "replace")}
                handle.write((json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        logger.warning(
            "proxy spool: %d unreadable lines of %s moved to %s", len(lines), source, QUARANTINE_NAME
        )

    def close(self) -> None:
        """Close this process's files; what they hold stays on disk for the next start."""
        with self._lock:
            files = [*self._sealed, *([self._active] if self._active is not None else [])]
            self._sealed, self._active = [], None
        for spool_file in files:
            if spool_file.lines:
                spool_file.handle.close()
            else:
                spool_file.remove()


class SpoolFlusher:
    """A background thread moving spooled turns into the inbox until it is stopped.

    Each pass is bounded (:attr:`TurnSpool.max_per_pass`); between passes it waits ``retry_s``
    (doubling after each failed pass, at most 5 s) or until :meth:`wake`. :meth:`start` runs one
    pass first, in the caller's thread, so a restart stores what an earlier process spooled before
    new turns come in.

    Args:
        spool: The spool to flush.
        add: Stores one turn in the inbox; ``False`` when its key is already stored.
        on_stored: Called after a pass that stored turns (wakes the inbox worker).
        retry_s: Wait between passes while turns are left.
    """

    def __init__(
        self,
        spool: TurnSpool,
        add: Callable[[SpooledTurn], bool],
        *,
        on_stored: Callable[[], None] | None = None,
        retry_s: float = 1.0,
    ) -> None:
        self.spool = spool
        self._add = add
        self._on_stored = on_stored
        self._retry_s = retry_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def flush_once(self) -> FlushResult:
        """Run one pass now; the worker is woken when it stored turns."""
        try:
            result = self.spool.flush(self._add)
        except OSError as exc:  # the spool directory itself is unusable: retried like an outage
            logger.warning("proxy spool: cannot read %s: %s", self.spool.directory, type(exc).__name__)
            return FlushResult(error=type(exc).__name__)
        if result.stored and self._on_stored is not None:
            self._on_stored()
        return result

    def start(self) -> None:
        """Flush once (what earlier processes left), then start the background thread."""
        self.flush_once()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="convmem-proxy-spool", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Ask for a pass soon (a turn was just spooled)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after one last pass (bounded by ``timeout``); spooled turns stay on disk."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.spool.close()

    def _run(self) -> None:
        delay = self._retry_s
        failing = False
        while not self._stop.is_set():
            if failing:
                # Backing off: a newly spooled turn does not cut the wait short (at 10 turns/s an
                # outage would otherwise be hit by a pass per turn).
                self._stop.wait(delay)
            else:
                self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                break
            result = self.flush_once()
            # A failing inbox is retried with backoff; a pass that got through resets the wait.
            failing = result.error is not None
            delay = min(delay * 2, max(self._retry_s, _MAX_BACKOFF_S)) if failing else self._retry_s
        if self.spool.pending:
            self.flush_once()  # a last try at shutdown; whatever fails stays spooled
