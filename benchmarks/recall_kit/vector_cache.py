"""Vectors of a model kept on disk, so repeated benchmark runs embed each text once.

Embedding LoCoMo's 5,882 turns with the offline model takes ~4 min of CPU (and over 30 min of
wall on a loaded 2-core host); a recall run that compares rankings needs the same vectors every
time. :class:`DiskCachedEmbeddings` wraps any LangChain ``Embeddings`` and keeps each vector in a
SQLite file keyed by the model's name, the kind (query or passage: e5 embeds them differently)
and the text's SHA-256; texts not in the file are embedded in one batch and written.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

from convmem_graph.embeddings import model_name

__all__ = ["DiskCachedEmbeddings"]


def _key(kind: str, text: str) -> str:
    return kind + ":" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class DiskCachedEmbeddings(Embeddings):
    """``inner``'s vectors, read from ``path`` when a text was embedded before (float32 BLOBs).

    The stored vectors' model name is ``inner``'s, so a memory embedded through the cache and one
    embedded without it hold the same model's vectors.

    Args:
        inner: The model that embeds texts not in the file.
        path: The SQLite file (created when missing).
    """

    def __init__(self, inner: Embeddings, path: str | Path) -> None:
        self.inner = inner
        self.model = model_name(inner)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False)
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS vec (model TEXT, key TEXT, v BLOB, PRIMARY KEY (model, key))"
        )
        #: Texts embedded by ``inner`` (not found in the file) since this object was made.
        self.computed = 0

    def _get(self, kind: str, texts: list[str]) -> list[list[float]]:
        keys = [_key(kind, t) for t in texts]
        with self._lock:
            found: dict[str, list[float]] = {}
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                marks = ",".join("?" * len(part))
                for key, blob in self._conn.execute(
                    f"SELECT key, v FROM vec WHERE model = ? AND key IN ({marks})",  # noqa: S608 - marks only
                    [self.model, *part],
                ):
                    found[key] = np.frombuffer(blob, dtype=np.float32).tolist()
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            by_key = {k: t for k, t in zip(keys, texts, strict=True)}
            todo = [by_key[k] for k in missing]
            vectors = (
                self.inner.embed_documents(todo)
                if kind == "passage"
                else [self.inner.embed_query(t) for t in todo]
            )
            with self._lock:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO vec VALUES (?, ?, ?)",
                    [
                        (self.model, k, np.asarray(v, dtype=np.float32).tobytes())
                        for k, v in zip(missing, vectors, strict=True)
                    ],
                )
                self._conn.commit()
                self.computed += len(missing)
            found.update(zip(missing, (list(v) for v in vectors), strict=True))
        return [found[k] for k in keys]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Passage vectors, from the file or from ``inner`` (then written)."""
        return self._get("passage", list(texts)) if texts else []

    def embed_query(self, text: str) -> list[float]:
        """The query vector, from the file or from ``inner`` (then written)."""
        return self._get("query", [text])[0]

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._conn.close()
