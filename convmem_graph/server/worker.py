"""The work loop of ``convmem serve``: inbox rows in, lifecycle runs out, off the request path.

One thread takes pending deliveries in arrival order, finds each one's memory (TRTC rows through
:mod:`convmem_graph.server.routing`), and runs the lifecycle once per memory per batch with that
memory's deliveries in order, so work for one memory is never reordered. Rows are marked done only
after their run committed: a crash in between re-reads them, which changes nothing. ``stop()``
drains what is pending before it returns (SIGTERM); a restart resumes from the inbox.

One poison never stops the queue: when a memory's run fails, its deliveries run one by one; a
delivery failing with a data error (a value the database or a parser refuses) goes to dead letters
with its reason at once, one failing with any other error after ``worker_max_attempts`` attempts
(with a growing delay; the count is kept in the row's note, so a restart does not reset it). The
later deliveries of that memory wait behind a delivery kept for a retry; other memories go on. A
database outage is no delivery's fault: the batch is retried, nothing is counted.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import exc as sa_exc
from sqlalchemy import select, update

from convmem_graph._ids import check_identifier
from convmem_graph.errors import ConvMemError
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message, ReadResult
from convmem_graph.server.inbox import Delivery, Inbox, TaskInfo
from convmem_graph.server.routing import TrtcFields, resolve_task, trtc_fields
from convmem_graph.server.settings import ServeSettings
from convmem_graph.state import RawInput
from convmem_graph.store.registry import inbox_table

__all__ = ["InboxWorker", "WorkerHandle", "is_data_error", "is_outage"]

logger = logging.getLogger(__name__)

#: The note of a pending delivery that failed and waits for a retry: the count survives a restart.
_ATTEMPT_NOTE = re.compile(r"attempt (\d+) of \d+ failed")
_MAX_RETRY_DELAY_S = 30.0
_MAX_REASON = 2000

#: Errors of the database being away (or locked); never a delivery's fault, so never counted.
_OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,  # the pool had no connection in time
    sa_exc.DisconnectionError,
)
#: Errors of the input itself: retrying the same delivery can never succeed.
_DATA_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.DataError,
    sa_exc.IntegrityError,
    ValueError,  # also pydantic's ValidationError, json's JSONDecodeError and UnicodeError
    UnicodeError,
    ConvMemError,
)


def is_outage(exc: BaseException) -> bool:
    """``True`` if ``exc`` says the database is unreachable or busy (retry later, not the input's fault)."""
    if isinstance(exc, _OUTAGE_ERRORS):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated


def is_data_error(exc: BaseException) -> bool:
    """``True`` if ``exc`` is a failure of the input itself (a value the database or a parser refuses).

    Example:
        >>> is_data_error(ValueError("bad")), is_data_error(RuntimeError("flaky"))
        (True, False)
    """
    if is_outage(exc):
        return False
    if isinstance(exc, _DATA_ERRORS):
        return True
    if isinstance(exc, sa_exc.StatementError) and not isinstance(exc, sa_exc.DBAPIError):
        # Raised before the database saw the statement (a bind value that cannot be converted).
        return isinstance(exc.orig, _DATA_ERRORS + (TypeError,))
    return False


def _reason(exc: BaseException) -> str:
    """A short reason for a log line or a dead letter (the driver's message, not the whole SQL)."""
    cause = exc.orig if isinstance(exc, sa_exc.StatementError) and exc.orig is not None else exc
    text = f"{type(exc).__name__}: {str(cause).strip()}"
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def _storable(text: str) -> str:
    """``text`` any database can store: NUL and lone surrogates escaped (PostgreSQL refuses both)."""
    text = text.replace("\x00", "\\u0000")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class WorkerHandle(Protocol):
    """What the routers and the app use of a worker (a thread or a child process)."""

    listeners: list[Callable[[list[str]], None]]

    def start(self) -> None:
        """Start working off the inbox."""

    def wake(self) -> None:
        """Tell the worker new work was stored."""

    def stop(self, timeout: float = 30.0) -> None:
        """Drain what is pending and stop."""

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is pending."""


@dataclass
class _Work:
    deliveries: list[Delivery] = field(default_factory=list)


class InboxWorker:
    """Runs the lifecycle on stored deliveries in a background thread.

    Args:
        mem: The memory the server serves.
        inbox: Where deliveries are stored.
        settings: Batch size, TRTC mapping and bot ids.
        on_error_delay_s: Pause after an unexpected error (a database outage) before retrying.
        retry_base_s: Delay before the second attempt of a failed delivery; it doubles per attempt
            (at most 30 s) until ``settings.worker_max_attempts``, then the delivery is a dead letter.
    """

    def __init__(
        self,
        mem: ConvMemory,
        inbox: Inbox,
        settings: ServeSettings,
        *,
        on_error_delay_s: float = 1.0,
        retry_base_s: float = 0.5,
    ) -> None:
        self.mem = mem
        self.inbox = inbox
        self.settings = settings
        self.on_error_delay_s = on_error_delay_s
        self.retry_base_s = retry_base_s
        #: Lifecycle runs done and deliveries failed on (``GET /metrics``; written by the worker thread).
        self.lifecycle_runs = 0
        self.lifecycle_errors = 0
        #: seq -> monotonic time before which a failed delivery is not tried again (this process).
        self._retry_at: dict[int, float] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._busy = False
        #: Called (in the worker thread) after each batch with the memory ids that changed.
        self.listeners: list[Callable[[list[str]], None]] = []

    # -- thread control -------------------------------------------------------------------
    def start(self) -> None:
        """Start the background thread (it first processes what a previous run left pending)."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="convmem-serve-worker", daemon=True)
        self._thread.start()
        self._wake.set()

    def wake(self) -> None:
        """Tell the thread new work was stored."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Process what is pending, then stop the thread (waits at most ``timeout`` seconds)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wake.set()
        thread.join(timeout)
        if thread.is_alive():
            logger.warning(
                "worker still busy after %.0f s; pending deliveries resume at the next start", timeout
            )
        self._thread = None

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is pending and no batch runs (for tests and the CLI); ``True`` if so."""
        with self._idle:
            return self._idle.wait_for(
                lambda: not self._busy and self.inbox.pending_count == 0 and not self._wake.is_set(), timeout
            )

    def _loop(self) -> None:
        while True:
            self._wake.wait(timeout=self._next_wait())
            self._wake.clear()
            stopping = self._stopping.is_set()
            try:
                with self._idle:
                    self._busy = True
                while self.run_once():
                    pass
            except Exception:  # noqa: BLE001 - the loop must survive a database outage
                logger.exception("serve worker: batch failed; retrying in %.1f s", self.on_error_delay_s)
                self._stopping.wait(self.on_error_delay_s)
                self._wake.set()
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()
            if stopping:
                return

    # -- one batch ------------------------------------------------------------------------
    def run_once(self) -> int:
        """Process one batch of pending deliveries; return how many were taken (0 = nothing to do now).

        Deliveries waiting out a retry delay (and the later ones of their memory) are left pending
        and not counted, so a loop calling this until it returns 0 does not spin on them.
        """
        rows = self.inbox.pending(self.settings.worker_batch)
        if len(rows) < self.settings.worker_batch:
            # Every pending row was read: forget retries of rows gone meanwhile (a deleted memory).
            present = {r.seq for r in rows}
            for seq in [s for s in self._retry_at if s not in present]:
                del self._retry_at[seq]
        if not rows:
            return 0
        now = time.monotonic()
        tasks: dict[str, TaskInfo] = {}
        held_tasks: set[str] = set()  # TRTC tasks with a delivery waiting out a retry delay
        taken = 0
        fresh: list[Delivery] = []
        for row in rows:
            if self._retry_at.get(row.seq, 0.0) > now:
                if row.vendor == "trtc" and row.task_id:
                    held_tasks.add(row.task_id)
                continue
            if row.vendor == "trtc" and row.task_id in held_tasks:
                continue  # a task's deliveries stay in order behind the one waiting
            fresh.append(row)
        newly_known, failed_routing = self._route_trtc_rows(fresh, tasks)
        held_memories = {self._memory_of(r, tasks) for r in rows if self._retry_at.get(r.seq, 0.0) > now}
        plan: dict[str, _Work] = {}
        for task_id in newly_known:
            # Deliveries parked before the task's memory was known join this batch, in order.
            memory_id = tasks[task_id].memory_id
            assert memory_id is not None
            plan.setdefault(memory_id, _Work()).deliveries.extend(self.inbox.waiting(task_id))
        parked: list[Delivery] = []
        for row in fresh:
            if row.seq in failed_routing:
                taken += 1
                owner = self._owner_of(row, tasks)
                if not self._fail(row, owner, failed_routing[row.seq]) and row.task_id:
                    held_tasks.add(row.task_id)
                continue
            if row.vendor == "trtc" and row.task_id in held_tasks:
                continue
            memory_id = row.memory_id
            if row.vendor == "trtc":
                memory_id = self._trtc_memory(row, tasks)
                if memory_id is None:
                    parked.append(row)
                    continue
            if not memory_id:
                self.inbox.finish([row.seq], status="failed", note="no memory id")
                taken += 1
                continue
            if memory_id in held_memories:
                continue  # this memory's deliveries stay in order behind the one waiting
            plan.setdefault(memory_id, _Work()).deliveries.append(row)
        for note, seqs in _by_note(parked, tasks).items():
            self.inbox.finish(seqs, status="waiting", note=note)
            taken += len(seqs)
        changed: list[str] = []
        for memory_id, work in plan.items():
            work.deliveries.sort(key=lambda d: d.seq)
            taken += len(work.deliveries)
            if self._run_memory(memory_id, work.deliveries, tasks):
                changed.append(memory_id)
        for listener in self.listeners if changed else ():
            try:
                listener(changed)
            except Exception:  # noqa: BLE001 - a listener must not stop the work loop
                logger.exception("serve worker: a batch listener failed")
        return taken

    def _run_memory(self, memory_id: str, deliveries: list[Delivery], tasks: dict[str, TaskInfo]) -> bool:
        """Ingest one memory's deliveries of this batch; ``True`` if any were stored.

        One run for all of them first; if that fails with anything but an outage, each delivery
        runs on its own, in order, so the one poison is found and the good ones are stored. A
        delivery that failed and is kept for a retry holds the later ones of its memory back.
        """
        changed = False
        todo = deliveries
        while todo:
            # A delivery retried after a failure in this process runs on its own at once.
            if todo[0].seq not in self._retry_at:
                try:
                    self._ingest(memory_id, todo, tasks)
                except Exception as exc:  # noqa: BLE001 - classified: outages go up, the rest is isolated
                    if is_outage(exc):
                        raise
                    if len(todo) == 1:
                        self._fail(todo[0], memory_id, exc)
                        return changed
                    logger.warning(
                        "serve worker: %d deliveries for memory %s failed together (%s); retrying one by one",
                        len(todo),
                        memory_id,
                        _reason(exc),
                    )
                else:
                    self._done(memory_id, [d.seq for d in todo])
                    return True
            stored: list[int] = []
            rest: list[Delivery] = []
            for i, delivery in enumerate(todo):
                try:
                    self._ingest(memory_id, [delivery], tasks)
                except Exception as exc:  # noqa: BLE001 - classified in _fail
                    if self._fail(delivery, memory_id, exc):
                        rest = todo[i + 1 :]  # the poison is out: the rest runs together again
                    # else: kept for a retry, the later deliveries of this memory wait behind it
                    break
                stored.append(delivery.seq)
            if stored:
                self._done(memory_id, stored)
                changed = True
            todo = rest
        return changed

    def _done(self, memory_id: str, seqs: list[int]) -> None:
        self.inbox.finish(seqs, memory_id=memory_id)
        self._forget(seqs)

    def _ingest(self, memory_id: str, deliveries: list[Delivery], tasks: dict[str, TaskInfo]) -> None:
        inputs, ended = self._inputs(deliveries, tasks)
        self.mem.ingest(memory_id, inputs, session_ended=ended)
        self.lifecycle_runs += 1

    # -- failures -------------------------------------------------------------------------
    def _fail(self, row: Delivery, memory_id: str | None, exc: BaseException) -> bool:
        """Handle one delivery that failed on its own; ``True`` if it left the queue (dead letter).

        A data error (the input can never be stored) goes to dead letters at once; any other error
        is retried with a growing delay, the attempt count kept in the row's note so a restart
        does not reset it, until ``worker_max_attempts``. An outage is re-raised, never counted.
        """
        if is_outage(exc):
            raise exc
        self.lifecycle_errors += 1
        reason = _reason(exc)
        if not is_data_error(exc):
            attempts = self._attempts(row.seq) + 1
            limit = self.settings.worker_max_attempts
            if attempts < limit:
                delay = min(self.retry_base_s * 2 ** (attempts - 1), _MAX_RETRY_DELAY_S)
                logger.warning(
                    "serve worker: delivery %d (memory %s) failed, attempt %d of %d; retrying in %.1f s: %s",
                    row.seq,
                    memory_id,
                    attempts,
                    limit,
                    delay,
                    reason,
                )
                self._set_note(row.seq, f"attempt {attempts} of {limit} failed: {reason}")
                self._retry_at[row.seq] = time.monotonic() + delay
                return False
            reason = f"failed {attempts} times, last: {reason}"
        self._dead_letter(row, memory_id, reason)
        return True

    def _dead_letter(self, row: Delivery, memory_id: str | None, reason: str) -> None:
        """Keep the delivery as a dead letter with its reason and take it out of the queue."""
        try:
            owner: str | None = None if memory_id is None else check_identifier(memory_id, "memory_id")
        except ValueError:
            owner = None  # an id the store refuses (too long, say) cannot own the dead letter
        logger.warning("serve worker: delivery %d (%s) goes to dead letters: %s", row.seq, row.vendor, reason)
        try:
            self.inbox.store.add_dead_letter(
                owner,
                source=f"serve inbox {row.vendor}",
                raw=_storable(row.body),
                error=_storable(reason),
                path=f"inbox seq {row.seq}",
            )
        except Exception as exc:  # noqa: BLE001 - classified: outages go up
            if is_outage(exc):
                raise
            # The row below keeps the reason: the queue must not stall on its own dead letter.
            logger.exception("serve worker: could not keep delivery %d as a dead letter", row.seq)
        # No memory id written: a value the database refused must not fail this update too.
        self.inbox.finish([row.seq], status="failed", note=_storable(f"dead letter: {reason}"))
        self._forget([row.seq])

    def _attempts(self, seq: int) -> int:
        """Failed attempts of a pending delivery so far, from its note (0 if none)."""
        query = select(inbox_table.c.note).where(inbox_table.c.seq == seq)
        with self.inbox.store.read() as conn:
            note = conn.execute(query).scalar_one_or_none()
        match = _ATTEMPT_NOTE.match(note or "")
        return int(match.group(1)) if match else 0

    def _set_note(self, seq: int, note: str) -> None:
        """Record a failed attempt; a parked (``waiting``) delivery comes back to the queue for its retry."""
        with self.inbox.store.transaction() as conn:
            conn.execute(
                update(inbox_table)
                .where(inbox_table.c.seq == seq, inbox_table.c.status.in_(("pending", "waiting")))
                .values(note=_storable(note), status="pending")
            )
        self.inbox.refresh_count()

    def _forget(self, seqs: list[int]) -> None:
        for seq in seqs:
            self._retry_at.pop(seq, None)

    def _next_wait(self) -> float:
        """Seconds until the next retry is due (at most 1 s: the loop also polls the inbox)."""
        if not self._retry_at:
            return 1.0
        return max(0.05, min(1.0, min(self._retry_at.values()) - time.monotonic()))

    def _memory_of(self, row: Delivery, tasks: dict[str, TaskInfo]) -> str | None:
        if row.vendor == "trtc" and row.task_id:
            info = tasks.get(row.task_id)
            return info.memory_id if info else row.memory_id
        return row.memory_id

    # -- TRTC routing ---------------------------------------------------------------------
    def _route_trtc_rows(
        self, rows: list[Delivery], tasks: dict[str, TaskInfo]
    ) -> tuple[list[str], dict[int, Exception]]:
        """Learn speakers and memory ids of the batch's TRTC tasks.

        Returns:
            The tasks newly resolved, and the deliveries whose routing failed (seq -> error): when
            saving a task fails, its deliveries are resolved and saved one by one to find the one
            that carried the bad value; the others keep their routing.
        """
        stored: dict[str, TaskInfo] = {}  # each task as it was before this batch
        by_task: dict[str, list[tuple[Delivery, TrtcFields]]] = {}
        failed: dict[int, Exception] = {}
        for row in rows:
            if row.vendor != "trtc" or not row.task_id:
                continue
            fields = trtc_fields(_json_object(row.body))
            if row.task_id not in stored:
                stored[row.task_id] = (
                    tasks.get(row.task_id) or self.inbox.task(row.task_id) or TaskInfo(row.task_id)
                )
            by_task.setdefault(row.task_id, []).append((row, fields))
            tasks[row.task_id] = self._resolve(
                tasks.get(row.task_id) or stored[row.task_id], fields, row.task_id
            )
        for task_id, info in list(tasks.items()):
            if info == stored[task_id]:
                continue
            try:  # one write per task this batch taught something
                self.inbox.save_task(info)
            except Exception as exc:  # noqa: BLE001 - classified: outages go up
                if is_outage(exc):
                    raise
                logger.warning(
                    "serve worker: saving TRTC task %s failed (%s); routing its deliveries one by one",
                    task_id,
                    _reason(exc),
                )
                tasks[task_id] = self._route_one_by_one(stored[task_id], by_task[task_id], failed)
        return [
            t for t, before in stored.items() if not self._routable(before) and self._routable(tasks[t])
        ], failed

    def _route_one_by_one(
        self, info: TaskInfo, rows: list[tuple[Delivery, TrtcFields]], failed: dict[int, Exception]
    ) -> TaskInfo:
        """Resolve and save a task delivery by delivery; a delivery whose save fails is left out."""
        for row, fields in rows:
            candidate = self._resolve(info, fields, info.task_id)
            if candidate == info:
                continue
            try:
                self.inbox.save_task(candidate)
            except Exception as exc:  # noqa: BLE001 - classified: outages go up
                if is_outage(exc):
                    raise
                failed[row.seq] = exc
                continue
            info = candidate
        return info

    def _resolve(self, info: TaskInfo, fields: TrtcFields, task_id: str) -> TaskInfo:
        resolved = resolve_task(
            info, fields, mode=self.settings.trtc_memory_from, bot_ids=self.settings.bot_ids
        )
        if not self._routable(resolved) and fields.event == 902:
            logger.warning(
                "TRTC task %s ended before its %s was known (mode %s); its deliveries wait "
                "in the inbox (set CONVMEM_BOT_IDS or register the call)",
                task_id,
                "memory id" if resolved.memory_id is None else "bot",
                self.settings.trtc_memory_from,
            )
        return resolved

    def _routable(self, info: TaskInfo) -> bool:
        """A task's deliveries can be read once its memory and which speaker is the bot are known.

        Without the bot (``CONVMEM_BOT_IDS``, a 905's ``UserId``, the registered call) or the
        human (a 904, the registered call), a bot's 903 would be read as the user's.
        """
        return info.memory_id is not None and bool(info.bot_id or info.human_id or self.settings.bot_ids)

    def _owner_of(self, row: Delivery, tasks: dict[str, TaskInfo]) -> str | None:
        """Whose a delivery that failed before its memory was known is, so a delete finds its dead letter.

        The task's memory when known, else what the mapping would make of the body: the human's
        ``UserId`` (not a bot) or the ``RoomId``. An id the store refuses owns nothing (see
        :meth:`_dead_letter`).
        """
        if row.memory_id or row.vendor != "trtc":
            return row.memory_id
        info = tasks.get(row.task_id or "")
        if info is not None and info.memory_id:
            return info.memory_id
        fields = trtc_fields(_json_object(row.body))
        mode = self.settings.trtc_memory_from
        if mode == "room":
            return fields.room_id
        bots = {*self.settings.bot_ids, *([info.bot_id] if info is not None and info.bot_id else [])}
        if mode == "user" and fields.user_id and fields.user_id not in bots and fields.event != 905:
            return fields.user_id
        return None

    def _trtc_memory(self, row: Delivery, tasks: dict[str, TaskInfo]) -> str | None:
        if row.task_id:
            info = tasks[row.task_id]
            return info.memory_id if self._routable(info) else None
        # A callback without a TaskId cannot be routed through a task; read it on its own.
        fields = trtc_fields(_json_object(row.body))
        return fields.user_id if self.settings.trtc_memory_from == "user" else fields.room_id

    def _inputs(self, deliveries: list[Delivery], tasks: dict[str, TaskInfo]) -> tuple[list[RawInput], bool]:
        inputs: list[RawInput] = []
        ended = False
        by_task: dict[str, list[Delivery]] = {}
        for d in deliveries:
            if d.vendor == "trtc":
                by_task.setdefault(d.task_id or "", []).append(d)
                ended = ended or d.event == 902
            elif d.vendor == "agora":
                # 103 is sent when the agent leaves: the session is over.
                inputs.append(RawInput(d.body, "agora", name=f"agora delivery {d.seq}"))
                ended = True
            elif d.vendor == "proxy":
                inputs.append(RawInput(_proxy_turn(d), "openai", name=f"proxy turn {d.seq}"))
        # A call's end is the task's, not the batch's: turns of a task whose 902 an earlier batch
        # took (late, parked, or cut off from it by the batch boundary) refresh the summary as
        # the 902 did, so the memory ends as one run over all the deliveries would leave it.
        ended = ended or bool(self.inbox.ended_tasks([t for t in by_task if t]))
        for task_id, rows in by_task.items():
            info = tasks.get(task_id) or self.inbox.task(task_id) or TaskInfo(task_id)
            # Only this batch's deliveries: the store completes a round stored earlier, as for
            # the library's own runs (sentences joined, the 905 text, interruption marks kept
            # in ``cm_round_interruptions``), whatever order they came in.
            wrapper: dict[str, Any] = {"deliveries": [d.body for d in rows]}
            if info.bot_id:
                wrapper["bot_user_id"] = info.bot_id
            if info.human_id:
                wrapper["target_user_id"] = info.human_id
            inputs.insert(0, RawInput(wrapper, "trtc", name=f"trtc task {task_id}"))
        return inputs, ended


def _by_note(parked: list[Delivery], tasks: dict[str, TaskInfo]) -> dict[str, list[int]]:
    """Group parked TRTC deliveries by why they wait (the note an operator reads)."""
    notes: dict[str, list[int]] = {}
    for row in parked:
        info = tasks.get(row.task_id or "")
        note = (
            "memory id of the TRTC task not known yet"
            if info is None or info.memory_id is None
            else "bot of the TRTC task not known yet (set CONVMEM_BOT_IDS or register the call)"
        )
        notes.setdefault(note, []).append(row.seq)
    return notes


def _json_object(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _proxy_turn(delivery: Delivery) -> ReadResult:
    doc = json.loads(delivery.body)
    return ReadResult(source="openai", messages=[Message.model_validate(m) for m in doc["messages"]])
