"""Call-start payloads of queries that match nothing, kept with the snapshot and handed out again.

Most call starts ask about something the memory does not hold: no stored turn is found, and the
memory block is the one kept for such queries (``memory_block.matchless_key``). The vendor
payload around that block is then a function of the snapshot, the vendor and the options other
than the query, so the whole rendered payload is kept per such key and copied out, instead of
building the block's options, the block and the vendor's messages again at every call.

Only plain JSON-like payloads are kept (dicts, lists, strings, numbers, booleans, ``None``): a
caller gets its own copy of the containers and may change it. A payload is kept for these very
snapshot parts (``current``); a snapshot changed in place, or a new one, renders again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from convmem_graph.models import MemorySnapshot
from convmem_graph.payloads.memory_block import MatchlessProof, matchless_proof
from convmem_graph.payloads.render import VENDORS, block_options, render_payload

__all__ = ["render_kept"]

#: Payloads kept per snapshot (vendors x budgets x option sets x facts expired by now); past it
#: the keeper starts over. A payload is a few kB and the store keeps up to 256 parsed snapshots:
#: at most ~16 MB for a process serving that many memories in that many ways.
_KEPT = 16
_SCALARS = (str, int, float, bool, type(None))
_IMMUTABLE = frozenset(_SCALARS)
#: The snapshot's cache entry of proofs that a query matched nothing, by (vendor, other options).
_PROOFS = "matchless_proofs"


@dataclass(frozen=True)
class _Kept:
    """One rendered payload, the snapshot parts it was rendered from, and how to copy it."""

    parts: tuple[object, ...]
    payload: Any
    copy: Callable[[Any], Any]

    def current(self, snapshot: MemorySnapshot) -> bool:
        """Whether ``snapshot`` holds the very objects the payload was rendered from."""
        return all(a is b for a, b in zip(self.parts, _parts(snapshot), strict=True))


def _parts(snapshot: MemorySnapshot) -> tuple[object, ...]:
    # Everything a vendor payload reads of the snapshot besides the found turns (none here).
    return (snapshot.variables, snapshot.specs, snapshot.fragments, snapshot.summary, snapshot.recent)


def _freeze(value: object) -> object:
    """A hashable form of an option's value that tells ``1``, ``1.0`` and ``True`` apart.

    Raises:
        TypeError: For a value that is not plain JSON data (the payload is then not kept).
    """
    if isinstance(value, _SCALARS):
        return (type(value).__name__, value)
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("seq", tuple(_freeze(v) for v in value))
    raise TypeError(type(value).__name__)


def _plain(value: object) -> bool:
    """Whether ``value`` is plain JSON data, which :func:`_copy` copies fully."""
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return False


def _copy(value: Any) -> Any:
    """A copy of plain JSON data: new dicts and lists, the same immutable scalars."""
    # Scalars are kept inline: a payload is mostly a list of flat messages (~30 values).
    if isinstance(value, dict):
        return {k: v if type(v) in _IMMUTABLE else _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _IMMUTABLE else _copy(v) for v in value]
    return value


def _copy_messages(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of a list of flat dicts (most vendors' payload: messages of role and content)."""
    return list(map(dict.copy, value))


def _copier(value: Any) -> Callable[[Any], Any]:
    """:func:`_copy_messages` for a list of dicts holding scalars only, else :func:`_copy`."""
    if isinstance(value, list) and all(
        type(v) is dict and all(type(x) in _IMMUTABLE for x in v.values()) for v in value
    ):
        return _copy_messages
    return _copy


def _rest(options: Mapping[str, Any]) -> object:
    """The options but the query, frozen (:func:`_freeze`; ``TypeError`` for data not plain)."""
    return _freeze({k: v for k, v in options.items() if k != "query"})


def _proof(
    vendor: str, snapshot: MemorySnapshot, options: Mapping[str, Any], now_ms: int
) -> tuple[tuple[object, ...], MatchlessProof] | None:
    """The kept payload's key for this call and its proof, or ``None`` when its query may match something."""
    if vendor not in VENDORS:
        return None  # render_payload raises the error
    try:
        proof = matchless_proof(snapshot, block_options(vendor, options, now_ms))
        if proof is None:
            return None
        rest = _rest(options)
    except (TypeError, ValueError, ValidationError):
        return None  # not plain data, or options render_payload rejects with a clear error
    return (vendor, rest, proof.key), proof


def _proved_again(
    vendor: str, snapshot: MemorySnapshot, options: Mapping[str, Any], now_ms: int
) -> tuple[object, ...] | None:
    """The key of an earlier call's proof with these other options, when it holds for this query.

    What a proof rests on besides the query and the clock is a function of the snapshot parts
    it checks and of the options but the query (the key of :data:`_PROOFS`), so the block
    options, the language and the key need not be made again: only the query's own checks
    and the count of facts expired by now run. The query must be text and the clock a valid
    one (otherwise the full path decides, and may raise).
    """
    query = options.get("query")
    if type(query) is not str or not (now_ms is None or (type(now_ms) is int and now_ms >= 0)):
        return None
    proofs: dict[tuple[str, object], MatchlessProof] | None = snapshot.derived().get(_PROOFS)
    if not proofs:
        return None
    try:
        rest = _rest(options)
    except TypeError:
        return None
    proof = proofs.get((vendor, rest))
    if proof is None or not proof.holds(snapshot, query, now_ms):
        return None
    return (vendor, rest, proof.key)


def _keep_proof(snapshot: MemorySnapshot, key: tuple[object, ...], proof: MatchlessProof) -> None:
    proofs: dict[tuple[str, object], MatchlessProof] = snapshot.derived().setdefault(_PROOFS, {})
    if len(proofs) >= _KEPT:
        proofs.clear()
    proofs[(cast(str, key[0]), key[1])] = proof


def render_kept(vendor: str, snapshot: MemorySnapshot, options: Mapping[str, Any], *, now_ms: int) -> Any:
    """:func:`~convmem_graph.payloads.render.render_payload` for a call start, ranked by words.

    The same payload (equal, a fresh copy), kept per snapshot when the query provably matches
    nothing (see the module docstring); rendered as usual otherwise.
    """
    kept: dict[tuple[object, ...], _Kept] = snapshot.derived().setdefault("kept_payloads", {})
    key = _proved_again(vendor, snapshot, options, now_ms)
    if key is not None:
        known = kept.get(key)
        if known is not None and known.current(snapshot):
            return known.copy(known.payload)
    found = _proof(vendor, snapshot, options, now_ms)
    if found is not None:
        key, proof = found
        _keep_proof(snapshot, key, proof)
        known = kept.get(key)
        if known is not None and known.current(snapshot):
            return known.copy(known.payload)
    payload = render_payload(vendor, snapshot, options, now_ms=now_ms)
    # The first such call builds the block that proves the next ones match nothing: ask again.
    found = found or _proof(vendor, snapshot, options, now_ms)
    if found is not None and _plain(payload):
        key, proof = found
        _keep_proof(snapshot, key, proof)
        if len(kept) >= _KEPT:
            kept.clear()
        kept[key] = _Kept(_parts(snapshot), _copy(payload), _copier(payload))
    return payload
