"""The cached call-start snapshot's row text, with each fact's JSON kept from the memory's last save.

A live turn saves the snapshot again after every run: ~90 kB of JSON for 200 facts, of which one
or two changed. The facts come from the store's kept models (``summary_facts``: a row unchanged
since the last read gives the same model object back), so the JSON of a fact model serialized at
the memory's previous save is used again while that model is the same object with the same field
values. The text is byte for byte what ``snapshot.model_dump_json()`` gives: the fields before
and after ``fragments`` are serialized by pydantic as they are, and a model's JSON inside a list
is its own ``model_dump_json()``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from convmem_graph.models import Fragment, MemorySnapshot

__all__ = ["SnapshotJson"]

_NAMES = [name for name, field in MemorySnapshot.model_fields.items() if not field.exclude]
_AT = _NAMES.index("fragments")
#: The serialized fields before ``fragments`` (``memory_id`` first: never empty) and after it.
_BEFORE = set(_NAMES[:_AT])
_AFTER = set(_NAMES[_AT + 1 :])

#: (the model, a copy of its field values, its JSON), by ``id`` of the model.
_Kept = dict[int, tuple[Fragment, dict[str, Any], str]]


def _values(fragment: Fragment) -> dict[str, Any]:
    # Lists copied: an in-place change of one (source ids) must not look like the kept value.
    return {k: list(v) if isinstance(v, list) else v for k, v in fragment.__dict__.items()}


class SnapshotJson:
    """``MemorySnapshot.model_dump_json()`` that reuses the facts' JSON of each memory's last save.

    Bounded: the ``memories`` most recently saved memories keep their facts' JSON (and hold those
    models). A kept entry is used only for the same model object whose field values still equal
    the ones it was serialized with (fields assigned later are validated, so a value that equals
    the kept one is of its type), so a changed or new model is serialized again.

    Args:
        memories: How many memories' facts to keep.

    Attributes:
        reused: Facts whose kept JSON was used.
        serialized: Facts serialized by pydantic.
    """

    def __init__(self, memories: int = 64) -> None:
        self._memories = memories
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self.reused = 0
        self.serialized = 0

    def forget(self, memory_id: str) -> None:
        """Keep nothing of ``memory_id`` (it was deleted or purged)."""
        with self._lock:
            self._kept.pop(memory_id, None)

    def dumps(self, snapshot: MemorySnapshot) -> str:
        """The snapshot's JSON: what ``snapshot.model_dump_json()`` returns."""
        memory_id = snapshot.memory_id
        with self._lock:
            old = self._kept.get(memory_id, {})
        kept: _Kept = {}
        parts = []
        reused = 0
        for f in snapshot.fragments:
            entry = old.get(id(f))
            if entry is not None and entry[0] is f and entry[1] == f.__dict__:
                reused += 1
            else:
                entry = (f, _values(f), f.model_dump_json())
            kept[id(f)] = entry
            parts.append(entry[2])
        with self._lock:
            self._kept[memory_id] = kept
            self._kept.move_to_end(memory_id)
            while len(self._kept) > self._memories:
                self._kept.popitem(last=False)
            self.reused += reused
            self.serialized += len(parts) - reused
        head = snapshot.model_dump_json(include=_BEFORE)
        facts = '"fragments":[' + ",".join(parts) + "]"
        if not _AFTER:
            return head[:-1] + "," + facts + "}"
        tail = snapshot.model_dump_json(include=_AFTER)
        return head[:-1] + "," + facts + "," + tail[1:]
