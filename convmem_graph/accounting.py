"""Per-stage accounting: model calls and tokens of ``extract`` and ``summarize``, time of every node.

The model-calling nodes are wrapped (:func:`accounted_node`): the calls a node made are the growth
of the state's ``model_calls`` across it, and its tokens are the usage the chat model reported
(``AIMessage.usage_metadata``, collected by a callback LangChain adds to every model run inside
the node, as its own ``get_usage_metadata_callback`` does: any chat model is counted, no extractor
changes). The run's state then
carries ``model_usage``, e.g. ``{"extract": {"calls": 2, "prompt_tokens": 1830,
"completion_tokens": 214}}``; a stage with no model call is absent. A model that reports no usage
counts its calls with zero tokens.

Every node is timed too (:func:`timed_node`): the run's state carries ``node_ms``, the time spent
inside each node that ran, in run order (``{"ingest": 3.1, "normalize": 0.4, ...}``). It is part of
the end state a checkpointer keeps, so a run with ``durability="exit"`` (the default), whose
per-step checkpoints are never written, still shows where its time went (the viewer's lifecycle
page reads it).

Example:
    >>> usage = add_usage({}, "extract", calls=1, prompt_tokens=100, completion_tokens=20)
    >>> add_usage(usage, "extract", calls=1, prompt_tokens=50, completion_tokens=5)
    {'extract': {'calls': 2, 'prompt_tokens': 150, 'completion_tokens': 25}}
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.tracers.context import register_configure_hook

__all__ = ["STAGES", "accounted_node", "add_usage", "merge_node_ms", "merge_usage", "timed_node"]

F = TypeVar("F", bound=Callable[..., Any])

#: The lifecycle stages that may call a model.
STAGES = ("extract", "summarize")

Usage = dict[str, dict[str, int]]


def add_usage(
    usage: Mapping[str, Mapping[str, int]],
    stage: str,
    *,
    calls: int,
    prompt_tokens: int,
    completion_tokens: int,
) -> Usage:
    """Return ``usage`` with one stage's calls and tokens added (a new dict; ``usage`` is unchanged)."""
    out: Usage = {name: dict(counts) for name, counts in usage.items()}
    counts = out.setdefault(stage, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
    counts["calls"] = counts.get("calls", 0) + calls
    counts["prompt_tokens"] = counts.get("prompt_tokens", 0) + prompt_tokens
    counts["completion_tokens"] = counts.get("completion_tokens", 0) + completion_tokens
    return out


def merge_usage(total: Mapping[str, Mapping[str, int]], more: Mapping[str, Mapping[str, int]]) -> Usage:
    """Return the sum of two ``model_usage`` documents (runs of a replay, workers of a replay)."""
    out: Usage = {name: dict(counts) for name, counts in total.items()}
    for stage, counts in more.items():
        out = add_usage(
            out,
            stage,
            calls=int(counts.get("calls", 0)),
            prompt_tokens=int(counts.get("prompt_tokens", 0)),
            completion_tokens=int(counts.get("completion_tokens", 0)),
        )
    return out


class _TokenCounter(BaseCallbackHandler):
    """Adds up the ``usage_metadata`` of every chat model answer seen (any model, named or not)."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._lock = threading.Lock()

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                usage = getattr(message, "usage_metadata", None) or {}
                with self._lock:
                    self.prompt_tokens += int(usage.get("input_tokens", 0) or 0)
                    self.completion_tokens += int(usage.get("output_tokens", 0) or 0)


#: The counter of the node running in this context; LangChain adds it to every run started in it
#: (an inheritable configure hook, as LangChain's own usage callback does).
_counter: ContextVar[_TokenCounter | None] = ContextVar("convmem_model_tokens", default=None)
register_configure_hook(_counter, inheritable=True)


def accounted_node(stage: str, fn: F) -> F:
    """Return the node ``fn`` (``(state, ...)``) adding its model calls and tokens to ``model_usage``."""

    @functools.wraps(fn)
    def node(state: Any, *args: Any, **kwargs: Any) -> Any:
        before = int(state.get("model_calls", 0) or 0)
        seen = _TokenCounter()
        token = _counter.set(seen)
        try:
            result = fn(state, *args, **kwargs)
        finally:
            _counter.reset(token)
        if not isinstance(result, dict):
            return result
        calls = int(result.get("model_calls", before) or 0) - before
        prompt, completion = seen.prompt_tokens, seen.completion_tokens
        if calls <= 0 and not prompt and not completion:
            return result
        usage = add_usage(
            state.get("model_usage") or {},
            stage,
            calls=max(calls, 0),
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
        return {**result, "model_usage": usage}

    return node  # type: ignore[return-value]


def merge_node_ms(total: Mapping[str, float], more: Mapping[str, float]) -> dict[str, float]:
    """Return the per-node sum of two ``node_ms`` documents (the runs of a replay, its workers).

    Example:
        >>> merge_node_ms({"ingest": 1.5, "extract": 2.0}, {"ingest": 0.5, "inject": 1.0})
        {'ingest': 2.0, 'extract': 2.0, 'inject': 1.0}
    """
    out = dict(total)
    for node, ms in more.items():
        out[node] = round(out.get(node, 0.0) + float(ms), 3)
    return out


def timed_node(name: str, fn: F, *, starts_run: bool = False) -> F:
    """Return the node ``fn`` (``(state, ...)``) adding the time spent in it to the state's ``node_ms``.

    Args:
        name: The node's name (the key in ``node_ms``).
        fn: The node.
        starts_run: The run's first node: it starts a fresh ``node_ms`` (the state a checkpointer
            hands a new run still holds the previous run's).

    Only an attempt that returns is counted: a model node retried by its ``RetryPolicy`` shows the
    attempt that succeeded (the failed ones raised before their time could be written).
    """

    @functools.wraps(fn)
    def node(state: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = fn(state, *args, **kwargs)
        if not isinstance(result, dict):
            return result
        ms = round((time.perf_counter() - started) * 1000, 3)
        before = {} if starts_run else dict(state.get("node_ms") or {})
        before[name] = ms
        return {**result, "node_ms": before}

    return node  # type: ignore[return-value]
