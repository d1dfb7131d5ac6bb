"""Build the chat model the LLM extractor and summarizer call: ``ChatOpenAI`` for any compatible server.

OpenAI, DeepSeek, Qwen (DashScope compatible mode), vLLM and Ollama all speak the OpenAI chat
completions protocol, so one factory covers them through ``base_url``. Any other LangChain
``BaseChatModel`` can be handed to :class:`convmem_graph.extractors.llm.LLMExtractor` directly.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from openai import OpenAIError
from pydantic import SecretStr

__all__ = ["make_chat_model"]

logger = logging.getLogger(__name__)


def make_chat_model(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = 30,
    max_retries: int = 0,
) -> BaseChatModel:
    """Return a ``ChatOpenAI`` for ``model`` on an OpenAI-compatible server.

    ``max_retries`` defaults to 0 on purpose: retries belong to the LangGraph ``RetryPolicy`` of
    the calling node (see :func:`convmem_graph.extractors.llm.is_retryable`), so a 429 or a timeout
    is visible to the graph instead of being slept through inside the HTTP client.

    Args:
        model: Model name as the server knows it (``gpt-4o-mini``, ``deepseek-chat``, ``qwen-plus``).
        base_url: Server root including ``/v1``; defaults to ``OPENAI_BASE_URL``, then OpenAI's.
        api_key: Defaults to ``OPENAI_API_KEY``. Local servers without auth accept any value,
            e.g. ``"EMPTY"``. The key is never logged.
        timeout: Seconds per request.
        max_retries: Retries inside the OpenAI client.

    Returns:
        A LangChain chat model.

    Raises:
        ValueError: If the model name is empty, a number is out of range, or no API key is given
            and ``OPENAI_API_KEY`` is unset.

    Example:
        >>> chat = make_chat_model("qwen-plus", base_url="http://127.0.0.1:8000/v1", api_key="EMPTY")
        >>> chat.model_name, chat.max_retries
        ('qwen-plus', 0)
    """
    if not model or not model.strip():
        raise ValueError("make_chat_model: model name is empty")
    if timeout <= 0:
        raise ValueError(f"make_chat_model: timeout must be > 0 seconds, got {timeout!r}")
    if max_retries < 0:
        raise ValueError(f"make_chat_model: max_retries must be >= 0, got {max_retries!r}")
    # Unset arguments are left to ChatOpenAI, which reads OPENAI_BASE_URL / OPENAI_API_KEY itself
    # (the vendor's documented defaults): this package reads the environment only in cli/ and server/.
    try:
        chat = ChatOpenAI(
            model=model,
            base_url=base_url or None,
            api_key=SecretStr(api_key) if api_key else None,
            timeout=timeout,
            max_retries=max_retries,
        )
    except OpenAIError as exc:  # the OpenAI client found no key in the arguments or the environment
        raise ValueError(
            "make_chat_model: no API key: pass api_key= or set OPENAI_API_KEY "
            "(a local server without auth accepts any value, e.g. 'EMPTY')"
        ) from exc
    # Where requests go: the argument, else the client's own default (OPENAI_BASE_URL, then OpenAI's).
    url = str(chat.root_client.base_url)
    logger.debug(
        "chat model %s at %s (timeout %ss, %d client retries)",
        model,
        _without_userinfo(url),
        timeout,
        max_retries,
    )
    return chat


def _without_userinfo(url: str) -> str:
    # A base URL may carry credentials (https://user:token@host/v1): keep them out of logs.
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
