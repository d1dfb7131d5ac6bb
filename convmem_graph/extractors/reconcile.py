"""Reconcile extracted fragment candidates with the stored fragments of a memory.

Each candidate gets exactly one :class:`~convmem_graph.models.FragmentOp`, in candidate order:

- ``noop``: already known. Same normalized content as an active fragment (any key), or the same
  key with content contained in the known one ("用户喜欢跑步" vs "用户平时喜欢跑步").
- ``update``: same key, same polarity, compatible new wording or a refinement (the known content
  is contained in the new one), or a repeated temporary fact that extends its expiry.
- ``supersede``: a contradiction on the same key: the polarity flips ("喜欢香菜" -> "不吃香菜") or a
  single-valued slot changes value (``profile:city`` 杭州 -> 上海). The old fragment is kept as
  superseded by the store.
- ``add``: a key not known yet.

Candidates are also reconciled against earlier candidates of the same batch: a repeat becomes a
``noop`` (its message ids are merged into the earlier candidate), and a later candidate that
refines or contradicts an earlier one replaces it (the earlier op turns into a ``noop``; the later
one is decided against the stored fragment the earlier one was aimed at).

Keys are compared in their canonical form (:func:`~convmem_graph.text.keys.canonical_key`):
``Diet:Spicy Food``, ``diet:spicy_food`` and ``food:spicy_food`` are one key, so fragments written
by the heuristic extractor, by a model, by an older version or by hand relate to each other.

Stored fragments carry no polarity or value, so both are read from their content: the polarity
from negation words (不, 没, 讨厌, not, never, avoids ...), a single-valued slot's value by looking
for the candidate's value in the stored content. Everything is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from convmem_graph.models import Fragment, FragmentCandidate, FragmentOp
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.keys import canonical_key
from convmem_graph.text.scripts import norm_text

__all__ = ["content_polarity", "reconcile"]

_NEG_ZH = lazy_compile(r"不|没有|没|别|讨厌|厌恶|反感|害怕|怕|忌口|戒了|避免|受不了")
_NEG_EN = lazy_compile(
    r"\b(?:not|never|no longer|no|don't|doesn't|didn't|isn't|can't|cannot|won't|hates?|dislikes?|avoids?|"
    r"avoiding|detests?|despises?|afraid|scared|terrified|stopped|quit)\b|n't\b",
    re.IGNORECASE,
)


def content_polarity(content: str) -> int:
    """Read the polarity of a third-person fact from its wording: -1 if negated, else 1.

    Example:
        >>> content_polarity("用户不吃香菜。"), content_polarity("User likes coriander.")
        (-1, 1)
    """
    return -1 if _NEG_ZH.search(content) or _NEG_EN.search(content) else 1


@dataclass(slots=True)
class _Known:
    """A fact the batch is reconciled against: a stored fragment or an earlier candidate."""

    key: str
    content: str
    norm: str
    polarity: int
    value: str | None
    transient: bool
    expires_at: int | None
    #: The stored fragment this item is, or that the earlier candidate was aimed at.
    fragment: Fragment | None
    #: Index of the earlier candidate's op, ``None`` for a stored fragment.
    op_index: int | None


def _from_fragment(f: Fragment) -> _Known:
    return _Known(
        canonical_key(f.key),
        f.content,
        norm_text(f.content),
        content_polarity(f.content),
        None,
        f.transient,
        f.expires_at,
        f,
        None,
    )


def _from_candidate(c: FragmentCandidate, index: int, base: Fragment | None) -> _Known:
    return _Known(
        canonical_key(c.key),
        c.content,
        norm_text(c.content),
        c.polarity,
        c.value,
        c.transient,
        c.expires_at,
        base,
        index,
    )


_Rel = Literal["noop", "update", "supersede"]


def _relation(cand: FragmentCandidate, norm: str, known: _Known) -> tuple[_Rel, str]:
    """Decide noop / update / supersede for a candidate and a known fact with the same key."""
    if norm == known.norm or (len(norm) >= 2 and norm in known.norm):
        if known.transient and not cand.transient:
            return "update", "a temporary fact became durable"
        if cand.transient and (cand.expires_at or 0) > (known.expires_at or 0):
            return "update", "repeated temporary fact, expiry extended"
        return "noop", "already known"
    if _polarity_of(known, cand) != cand.polarity:
        return "supersede", "polarity flip on the same key"
    if cand.single_valued and cand.value:
        if known.op_index is not None:
            changed = known.value is not None and norm_text(known.value) != norm_text(cand.value)
        else:
            changed = norm_text(cand.value) not in known.norm
        if changed:
            return "supersede", f"single-valued slot changed to {cand.value!r}"
    return "update", "same key, new wording" if known.norm not in norm else "same key, refined"


def _polarity_of(known: _Known, cand: FragmentCandidate) -> int:
    if known.op_index is not None:
        return known.polarity
    # When the wording detector disagrees with the candidate's own label it does not understand
    # this phrasing; compare the two wordings with each other instead.
    if content_polarity(cand.content) != cand.polarity:
        return cand.polarity if content_polarity(cand.content) == known.polarity else -cand.polarity
    return known.polarity


def _merge_ids(into: FragmentCandidate, extra: Sequence[str]) -> FragmentCandidate:
    ids = list(into.source_message_ids)
    ids.extend(i for i in extra if i not in ids)
    return into if ids == into.source_message_ids else into.model_copy(update={"source_message_ids": ids})


def reconcile(candidates: Sequence[FragmentCandidate], existing: Sequence[Fragment]) -> list[FragmentOp]:
    """Decide one operation per candidate against active fragments and earlier candidates.

    Args:
        candidates: Candidates of one batch, in extraction order.
        existing: Stored fragments of the memory; only ``status == "active"`` ones count.

    Returns:
        One :class:`FragmentOp` per candidate, in the same order. ``target_id`` is the stored
        fragment matched, updated or superseded (``None`` for adds and for repeats of a new fact
        within the batch).

    Example:
        >>> from convmem_graph.models import FragmentCandidate
        >>> c = FragmentCandidate(content="用户住在上海。", key="profile:city", value="上海",
        ...                       single_valued=True)
        >>> old = Fragment(id="f1", memory_id="m", content="用户住在杭州。", key="profile:city")
        >>> [(op.op, op.target_id) for op in reconcile([c], [old])]
        [('supersede', 'f1')]
    """
    by_key: dict[str, _Known] = {}
    by_norm: dict[str, _Known] = {}
    active = sorted(
        (f for f in existing if f.status == "active"), key=lambda f: (f.updated_at, f.created_at, f.id)
    )
    for f in active:
        stored = _from_fragment(f)
        by_key[stored.key] = stored
        by_norm.setdefault(stored.norm, stored)

    ops: list[FragmentOp] = []
    for index, cand in enumerate(candidates):
        norm = norm_text(cand.content)
        known = by_key.get(canonical_key(cand.key))
        if known is None:
            twin = by_norm.get(norm)
            if twin is not None:
                ops.append(_repeat(ops, cand, twin, "same content under another key"))
                continue
            ops.append(FragmentOp(op="add", candidate=cand, reason="new key"))
            _remember(by_key, by_norm, _from_candidate(cand, index, None))
            continue
        rel, why = _relation(cand, norm, known)
        if rel == "noop":
            ops.append(_repeat(ops, cand, known, why))
            continue
        if known.op_index is None:
            ops.append(FragmentOp(op=rel, candidate=cand, target_id=_id(known), reason=why))
            _remember(by_key, by_norm, _from_candidate(cand, index, known.fragment))
            continue
        # The candidate refines or contradicts an earlier candidate of this batch: it replaces it.
        if by_norm.get(known.norm) is known:
            del by_norm[known.norm]
        earlier = ops[known.op_index]
        ops[known.op_index] = FragmentOp(
            op="noop",
            candidate=earlier.candidate,
            target_id=earlier.target_id,
            reason=f"replaced by candidate #{index} of the same batch",
        )
        if rel == "update":
            cand = _merge_ids(cand, earlier.candidate.source_message_ids)
        base = known.fragment
        if base is None:
            ops.append(FragmentOp(op="add", candidate=cand, reason=f"new key ({why} within the batch)"))
        else:
            rel2, why2 = _relation(cand, norm, _from_fragment(base))
            ops.append(FragmentOp(op=rel2, candidate=cand, target_id=base.id, reason=why2))
        _remember(by_key, by_norm, _from_candidate(cand, index, base))
    return ops


def _id(known: _Known) -> str | None:
    return known.fragment.id if known.fragment is not None else None


def _remember(by_key: dict[str, _Known], by_norm: dict[str, _Known], known: _Known) -> None:
    by_key[known.key] = known
    by_norm[known.norm] = known


def _repeat(ops: list[FragmentOp], cand: FragmentCandidate, known: _Known, why: str) -> FragmentOp:
    """A noop for a repeat; a repeat of an earlier candidate lends it its message ids."""
    if known.op_index is None:
        return FragmentOp(op="noop", candidate=cand, target_id=_id(known), reason=why)
    earlier = ops[known.op_index]
    if earlier.op != "noop":
        merged = _merge_ids(earlier.candidate, cand.source_message_ids)
        if merged is not earlier.candidate:
            ops[known.op_index] = earlier.model_copy(update={"candidate": merged})
    return FragmentOp(
        op="noop",
        candidate=cand,
        target_id=earlier.target_id if earlier.op != "add" else None,
        reason=f"{why} (candidate #{known.op_index} of the same batch)",
    )
