"""LangGraph's per-run background pool replaced, for one of convmem's own runs, by the calling thread.

``Pregel.stream`` opens a new ``ContextThreadPoolExecutor`` for every run (LangGraph 1.2's
``BackgroundExecutor``, through ``langchain_core``'s ``get_executor_for_config``) and shuts it
down at the run's end. Every step of convmem's graph runs one node in the calling thread, so that
pool only carries the checkpoint writes, and the run waits for each of them anyway: with ``exit``
durability the one end-state write, at the run's end (``BackgroundExecutor.__exit__`` waits for
it); with ``sync`` each step's before the next. One thread was started and joined per run for
it: ~0.2 ms of CPU and ~0.6 ms of wall time at load 13 in a bare loop, x0.93 of a fact turn's CPU
in same-process paired rounds (see benchmarks/README.md, issue 24, ninth session, H3).

:func:`inline_background` marks the next LangGraph run begun in this context: the pool of that
run's loop is an executor that runs what is submitted at once, in the submitting thread. The mark
is taken by the first pool asked for, which is the loop's own (opened when the stream starts), so
a graph a node runs inside the run gets LangGraph's thread pool as before. LangGraph offers no way
to hand a run its executor, so this wraps the module attribute LangGraph's loop reads; where that
attribute is missing (another LangGraph version) nothing is wrapped and runs use LangGraph's pool.
``tests/unit/test_inline_background.py`` fails if a run starts a thread again.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

__all__ = ["InlineExecutor", "inline_background", "installed"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Set by :func:`inline_background`; taken (set back to False) by the first pool asked for.
_NEXT_RUN_INLINE: ContextVar[bool] = ContextVar("convmem_next_run_inline", default=False)
_INSTALL_LOCK = threading.Lock()
_installed: bool | None = None


class InlineExecutor(concurrent.futures.Executor):
    """An executor that runs each submitted call at once in the submitting thread.

    Example:
        >>> InlineExecutor().submit(sum, [1, 2]).result()
        3
    """

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        """Run ``fn(*args, **kwargs)`` now; a future holding its result or its exception."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed over through the future, as a pool does
            future.set_exception(exc)
        else:
            future.set_result(result)
        return future


def installed() -> bool:
    """Wrap LangGraph's pool factory once; whether runs can be made inline (False: not this LangGraph)."""
    global _installed
    if _installed is not None:
        return _installed
    with _INSTALL_LOCK:
        if _installed is None:
            _installed = _install()
    return _installed


def _install() -> bool:
    try:
        from langgraph.pregel import _executor
    except ImportError:  # pragma: no cover - LangGraph moved its executor module
        return False
    original = getattr(_executor, "get_executor_for_config", None)  # imported there from langchain_core
    if original is None or not hasattr(_executor, "BackgroundExecutor"):  # pragma: no cover
        return False
    if getattr(original, "convmem_inline", False):
        return True

    @contextmanager
    def get_executor_for_config(config: Any) -> Iterator[concurrent.futures.Executor]:
        if _NEXT_RUN_INLINE.get():
            _NEXT_RUN_INLINE.set(False)
            yield InlineExecutor()
            return
        with original(config) as executor:
            yield executor

    get_executor_for_config.convmem_inline = True  # type: ignore[attr-defined]
    _executor.get_executor_for_config = get_executor_for_config  # type: ignore[attr-defined]
    return True


@contextmanager
def _marked() -> Iterator[None]:
    token = _NEXT_RUN_INLINE.set(True)
    try:
        yield
    finally:
        _NEXT_RUN_INLINE.reset(token)


def inline_background(enabled: bool = True) -> AbstractContextManager[None]:
    """Inside, the next LangGraph run begun in this context runs its background work inline.

    Args:
        enabled: False gives a context that changes nothing (for a run whose background writes
            are meant to overlap its steps: ``async`` durability).

    Example:
        >>> with inline_background():
        ...     pass
    """
    if not enabled or not installed():
        return _nothing()
    return _marked()


@contextmanager
def _nothing() -> Iterator[None]:
    yield
