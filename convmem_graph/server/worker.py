"""The work loop of ``convmem serve``: inbox rows in, lifecycle runs out, off the request path.

One thread takes pending deliveries in arrival order, finds each one's memory (TRTC rows through
:mod:`convmem_graph.server.routing`), and runs the lifecycle once per memory per batch with that
memory's deliveries in order, so work for one memory is never reordered. Rows are marked done only
after their run committed: a crash in between re-reads them, which changes nothing. ``stop()``
drains what is pending before it returns (SIGTERM); a restart resumes from the inbox.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from convmem_graph.errors import ConvMemError
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message, ReadResult
from convmem_graph.server.inbox import Delivery, Inbox, TaskInfo
from convmem_graph.server.routing import resolve_task, trtc_fields
from convmem_graph.server.settings import ServeSettings
from convmem_graph.state import RawInput

__all__ = ["InboxWorker", "WorkerHandle"]

logger = logging.getLogger(__name__)


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
    """

    def __init__(
        self, mem: ConvMemory, inbox: Inbox, settings: ServeSettings, *, on_error_delay_s: float = 1.0
    ) -> None:
        self.mem = mem
        self.inbox = inbox
        self.settings = settings
        self.on_error_delay_s = on_error_delay_s
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
            self._wake.wait(timeout=1.0)
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
        """Process one batch of pending deliveries; return how many were taken (0 = nothing pending)."""
        rows = self.inbox.pending(self.settings.worker_batch)
        if not rows:
            return 0
        plan: dict[str, _Work] = {}
        tasks: dict[str, TaskInfo] = {}
        newly_known = self._route_trtc_rows(rows, tasks)
        for task_id in newly_known:
            # Deliveries parked before the task's memory was known join this batch, in order.
            memory_id = tasks[task_id].memory_id
            assert memory_id is not None
            plan.setdefault(memory_id, _Work()).deliveries.extend(self.inbox.waiting(task_id))
        parked: list[int] = []
        for row in rows:
            memory_id = row.memory_id
            if row.vendor == "trtc":
                memory_id = self._trtc_memory(row, tasks)
                if memory_id is None:
                    parked.append(row.seq)
                    continue
            if not memory_id:
                self.inbox.finish([row.seq], status="failed", note="no memory id")
                continue
            plan.setdefault(memory_id, _Work()).deliveries.append(row)
        if parked:
            self.inbox.finish(parked, status="waiting", note="memory id of the TRTC task not known yet")
        changed: list[str] = []
        for memory_id, work in plan.items():
            work.deliveries.sort(key=lambda d: d.seq)
            seqs = [d.seq for d in work.deliveries]
            try:
                inputs, ended = self._inputs(work.deliveries, tasks)
                self.mem.ingest(memory_id, inputs, session_ended=ended)
            except ConvMemError as exc:
                # Bad input never gets better by retrying: keep the rows with the reason.
                logger.warning("serve worker: deliveries %s for memory %s failed: %s", seqs, memory_id, exc)
                self.inbox.finish(seqs, memory_id=memory_id, status="failed", note=str(exc)[:2000])
                continue
            self.inbox.finish(seqs, memory_id=memory_id)
            changed.append(memory_id)
        for listener in self.listeners if changed else ():
            try:
                listener(changed)
            except Exception:  # noqa: BLE001 - a listener must not stop the work loop
                logger.exception("serve worker: a batch listener failed")
        return len(rows)

    def _route_trtc_rows(self, rows: list[Delivery], tasks: dict[str, TaskInfo]) -> list[str]:
        """Learn speakers and memory ids of the batch's TRTC tasks; return the tasks newly resolved."""
        stored: dict[str, TaskInfo] = {}  # each task as it was before this batch
        for row in rows:
            if row.vendor != "trtc" or not row.task_id:
                continue
            fields = trtc_fields(_json_object(row.body))
            info = tasks.get(row.task_id) or self.inbox.task(row.task_id) or TaskInfo(row.task_id)
            stored.setdefault(row.task_id, info)
            tasks[row.task_id] = resolve_task(
                info, fields, mode=self.settings.trtc_memory_from, bot_ids=self.settings.bot_ids
            )
            if tasks[row.task_id].memory_id is None and fields.event == 902:
                logger.warning(
                    "TRTC task %s ended before its memory id was known (mode %s); its deliveries wait "
                    "in the inbox (set CONVMEM_BOT_IDS or register the task)",
                    row.task_id,
                    self.settings.trtc_memory_from,
                )
        for task_id, info in tasks.items():
            if info != stored[task_id]:  # one write per task this batch taught something
                self.inbox.save_task(info)
        return [
            t for t, before in stored.items() if before.memory_id is None and tasks[t].memory_id is not None
        ]

    def _trtc_memory(self, row: Delivery, tasks: dict[str, TaskInfo]) -> str | None:
        if row.task_id:
            return tasks[row.task_id].memory_id
        # A callback without a TaskId cannot be routed through a task; read it on its own.
        fields = trtc_fields(_json_object(row.body))
        return fields.user_id if self.settings.trtc_memory_from == "user" else fields.room_id

    def _inputs(self, deliveries: list[Delivery], tasks: dict[str, TaskInfo]) -> tuple[list[RawInput], bool]:
        inputs: list[RawInput] = []
        ended = False
        by_task: dict[str, list[str]] = {}
        for d in deliveries:
            if d.vendor == "trtc":
                by_task.setdefault(d.task_id or "", []).append(d.body)
                ended = ended or d.event == 902
            elif d.vendor == "agora":
                # 103 is sent when the agent leaves: the session is over.
                inputs.append(RawInput(d.body, "agora", name=f"agora delivery {d.seq}"))
                ended = True
            elif d.vendor == "proxy":
                inputs.append(RawInput(_proxy_turn(d), "openai", name=f"proxy turn {d.seq}"))
        for task_id, bodies in by_task.items():
            info = tasks.get(task_id) or self.inbox.task(task_id) or TaskInfo(task_id)
            wrapper: dict[str, Any] = {"deliveries": bodies}
            if info.bot_id:
                wrapper["bot_user_id"] = info.bot_id
            if info.human_id:
                wrapper["target_user_id"] = info.human_id
            inputs.insert(0, RawInput(wrapper, "trtc", name=f"trtc task {task_id}"))
        return inputs, ended


def _json_object(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _proxy_turn(delivery: Delivery) -> ReadResult:
    doc = json.loads(delivery.body)
    return ReadResult(source="openai", messages=[Message.model_validate(m) for m in doc["messages"]])
