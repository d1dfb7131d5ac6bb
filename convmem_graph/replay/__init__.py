"""Batch replay of stored conversation archives into memories.

Files (JSON, JSON Lines, gzip of either) and folders of them are streamed document by document;
documents are grouped into memories by a stated rule, batched, and run through the lifecycle with
several memories in parallel. Replay is idempotent (message ids come from the sources' own keys,
fragment ids from their content) and resumable: a file is marked done in the database once all of
its batches committed, and a rerun skips done files and re-reads the others, adding nothing twice.

Grouping rules (``group_by``):

- ``auto`` (default): an explicit memory id found in the payload (Agora ``labels.memory_id``),
  else the human's user id found in it (IM operator account, TRTC target user, Agora uid,
  OpenAI ``user``), else the file name without extensions.
- ``user``: the memory id or user id found in the payload; documents with neither are quarantined.
- ``file``: one memory per file, named after the file without extensions.
- a fixed ``memory_id`` puts everything into one memory.

The package, built on the lifecycle runner (:class:`~convmem_graph.runner.Lifecycle`):
:mod:`~convmem_graph.replay.discover` (files, shards), :mod:`~convmem_graph.replay.read` (the
replayer), :mod:`~convmem_graph.replay.progress` (progress rows, dead letters, the report) and
:mod:`~convmem_graph.replay.workers` (worker processes). Files are read by
:func:`convmem_graph.sources.files.iter_documents`, the reader ``sources`` uses too.
"""

from __future__ import annotations

from convmem_graph.replay.discover import discover_files, parse_shard, shard_of
from convmem_graph.replay.progress import ReplayReport, forget_replay_file
from convmem_graph.replay.progress import _ProgressSender as _ProgressSender
from convmem_graph.replay.read import GroupBy, Replayer
from convmem_graph.replay.read import _pool_room as _pool_room
from convmem_graph.replay.workers import _start_method as _start_method
from convmem_graph.replay.workers import default_concurrency as default_concurrency
from convmem_graph.replay.workers import replay_in_processes

__all__ = [
    "GroupBy",
    "ReplayReport",
    "Replayer",
    "discover_files",
    "forget_replay_file",
    "parse_shard",
    "replay_in_processes",
    "shard_of",
]
