"""Per-stage model accounting: calls and prompt/completion tokens of ``extract`` and ``summarize``.

The model-calling nodes are wrapped (:func:`accounted_node`): the calls a node made are the growth
of the state's ``model_calls`` across it, and its tokens are the usage the chat model reported
(``AIMessage.usage_metadata``, collected by a callback LangChain adds to every model run inside
the node, as its own ``get_usage_metadata_callback`` does: any chat model is counted, no extractor
changes). The run's state then
carries ``model_usage``, e.g. ``{"extract": {"calls": 2, "prompt_tokens": 1830,
"completion_tokens": 214}}``; a stage with no model call is absent. A model that reports no usage
counts its calls with zero tokens.

Example:
    >>> usage = add_usage({}, "extract", calls=1, prompt_tokens=100, completion_tokens=20)
    >>> add_usage(usage, "extract", calls=1, prompt_tokens=50, completion_tokens=5)
    {'extract': {'calls': 2, 'prompt_tokens': 150, 'completion_tokens': 25}}
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.tracers.context import register_configure_hook

__all__ = ["STAGES", "accounted_node", "add_usage", "merge_usage"]

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
