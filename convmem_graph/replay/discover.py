"""Finding the archive files of a replay and sharding memories over workers."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["discover_files", "parse_shard", "shard_of"]

# One logger for the package, named as before the split (handlers and levels set on it apply).
logger = logging.getLogger("convmem_graph.replay")


_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")


def discover_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and folders into the sorted list of archive files to replay.

    Symlinked folders are followed and each one is reported (a warning naming link and target);
    a folder reached twice (a symlink loop or two links to one place) is read once and reported.
    Entries that are neither folders nor regular files are left to the reader, which refuses them
    by name.
    """
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            found.append(p)
            continue
        seen: set[str] = set()
        batch: list[Path] = []
        for root, dirs, files in os.walk(p, followlinks=True):
            real = os.path.realpath(root)
            if real in seen:
                logger.warning("replay: %s leads to a folder already read (%s); not read again", root, real)
                dirs[:] = []
                continue
            seen.add(real)
            dirs.sort()
            for d in dirs:
                link = Path(root, d)
                if link.is_symlink():
                    logger.warning(
                        "replay: following symlinked folder %s -> %s", link, os.path.realpath(link)
                    )
            batch.extend(Path(root, f) for f in files if f.lower().endswith(_SUFFIXES))
        found.extend(sorted(batch))
    return found


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``i/n`` (0-based shard i of n) and validate it."""
    try:
        i_s, n_s = text.split("/", 1)
        i, n = int(i_s), int(n_s)
    except ValueError as exc:
        raise ValueError(f"--shard must look like i/n, e.g. 0/2; got {text!r}") from exc
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard i/n needs 0 <= i < n; got {text!r}")
    return i, n


def shard_of(memory_id: str, n: int) -> int:
    """Return the shard (0..n-1) that owns ``memory_id``: stable across processes and hosts."""
    return int.from_bytes(hashlib.blake2b(memory_id.encode("utf-8"), digest_size=8).digest(), "big") % n


def _stem(path: Path) -> str:
    name = path.name
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _file_shard_key(path: Path) -> str:
    """The key that assigns a file's memory-less problems to one shard."""
    return f"\x00file:{os.fsencode(path).hex()}"
