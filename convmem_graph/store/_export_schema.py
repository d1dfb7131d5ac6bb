"""The schema of an exported memory document, checked in full before an import writes anything.

Every row model forbids unknown fields, so a document cannot choose database-internal keys (message
``seq``, audit and dead-letter row ids): those are assigned by the store. Ids, keys, categories and
variable names follow the one identifier rule of :mod:`convmem_graph._ids`; texts, lists and
numbers have bounds, so a tampered document is refused with one line naming its JSON path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from convmem_graph._ids import IdentifierKind, check_identifier
from convmem_graph.errors import ConvMemError, InvalidIdentifierError
from convmem_graph.store.records import AuditAction, AuditKind

__all__ = ["EXPORT_LIMITS", "ExportDocument", "ExportFormatError", "parse_export"]

#: Bounds of an importable document (characters or items).
EXPORT_LIMITS: dict[str, int] = {
    "text": 100_000,  # a message's content / original, a summary
    "short_text": 4_000,  # a description, an error, a path, an audit cause
    "raw": 1_000_000,  # a dead letter's raw item
    "list": 10_000,  # source ids of a fragment, values of a variable
    "rows": 1_000_000,  # rows of one kind
}
#: Timestamps are ms since the epoch and must fit a JSON number exactly.
_MAX_MS = 2**53
_MAX_I64 = 2**63 - 1


def _ident(kind: IdentifierKind) -> Any:
    def check(value: str) -> str:
        return check_identifier(value, kind)

    return AfterValidator(check)


Ident = Annotated[str, _ident("id")]
Key = Annotated[str, _ident("key")]
Category = Annotated[str, _ident("category")]
VariableName = Annotated[str, _ident("variable")]
MemoryId = Annotated[str, _ident("memory_id")]
Ms = Annotated[int, Field(ge=0, le=_MAX_MS)]
Text = Annotated[str, Field(max_length=EXPORT_LIMITS["text"])]
ShortText = Annotated[str, Field(max_length=EXPORT_LIMITS["short_text"])]
ShortName = Annotated[str, Field(min_length=1, max_length=64)]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ExportMessage(_Row):
    """A message row (no ``seq``: the store numbers messages in document order)."""

    id: Ident
    role: Literal["user", "assistant"]
    content: Text
    channel: Literal["im", "voice", "api"]
    source: Annotated[str, Field(min_length=1, max_length=32)]
    timestamp_ms: Ms
    turn_id: Annotated[int, Field(ge=-_MAX_I64, le=_MAX_I64)] | None = None
    round_id: Ident | None = None
    speaker_id: Ident | None = None
    partial: bool = False
    interrupted: bool = False
    original: Text | None = None
    metadata: dict[str, Any] | None = None
    #: Derived from role and content; recomputed on import, whatever the document says.
    content_hash: Annotated[int, Field(ge=-(2**63), le=_MAX_I64)] | None = None


class ExportFragment(_Row):
    """A fragment row."""

    id: Ident
    content: Annotated[str, Field(min_length=1, max_length=200)]
    category: Category
    key: Key
    status: Literal["active", "superseded", "deleted"]
    transient: bool = False
    expires_at: Ms | None = None
    source_message_ids: Annotated[list[Ident], Field(max_length=EXPORT_LIMITS["list"])] | None = None
    origin: Literal["extracted", "manual", "api"]
    superseded_by: Ident | None = None
    confidence: Annotated[float, Field(ge=0.0, le=1.0, strict=False)] = 1.0
    created_at: Ms
    updated_at: Ms
    observed_at: Ms = 0
    part_of: Ident | None = None
    part: Annotated[int, Field(ge=0, le=EXPORT_LIMITS["list"])] | None = None
    # Columns derived from key and content (written by newer versions): checked, then recomputed
    # on import (see convmem_graph.store.transfer.import_memory).
    ckey: Key | None = None
    norm_hash: Annotated[int, Field(ge=-(2**63), le=_MAX_I64)] | None = None
    cjk: bool | None = None


class ExportSpec(_Row):
    """A variable-schema row."""

    name: VariableName
    position: Annotated[int, Field(ge=0, le=100_000)]
    description: ShortText = ""
    infer: bool = True
    type: Literal["string", "integer", "list"]
    allowed_values: Annotated[list[ShortText], Field(max_length=EXPORT_LIMITS["list"])] | None = None


VariableValue = (
    Annotated[str, Field(max_length=EXPORT_LIMITS["short_text"])]
    | Annotated[int, Field(ge=-_MAX_I64, le=_MAX_I64)]
    | Annotated[list[ShortText], Field(max_length=EXPORT_LIMITS["list"])]
)


class ExportVariable(_Row):
    """A manual or inferred variable value."""

    name: VariableName
    origin: Literal["inferred", "manual"]
    value: VariableValue
    fragment_ids: Annotated[list[Ident], Field(max_length=EXPORT_LIMITS["list"])] | None = None
    updated_at: Ms


class ExportSummary(_Row):
    """The summary row."""

    text: Text
    tokens: Annotated[int, Field(ge=0, le=EXPORT_LIMITS["text"])]
    covers_until_ms: Ms
    version: Annotated[int, Field(ge=1, le=_MAX_I64)]
    updated_at: Ms
    origin: Literal["model", "extractive"] = "model"


class ExportAudit(_Row):
    """An audit row (no ``id``: the store numbers them)."""

    at: Ms
    kind: AuditKind
    object_id: Ident
    action: AuditAction
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    cause: ShortText = ""


class ExportDeadLetter(_Row):
    """A dead letter (no ``id``; ``item_key`` is recomputed from the target memory and raw item)."""

    item_key: Annotated[str, Field(max_length=40)] | None = None
    source: ShortName
    raw: Annotated[str, Field(max_length=EXPORT_LIMITS["raw"])]
    error: ShortText
    path: ShortText = "$"
    created_at: Ms


class ExportHead(_Row):
    """The ``memory`` object: id, description, times and processing cursors as message counts."""

    memory_id: MemoryId
    description: ShortText = ""
    created_at: Ms = 0
    updated_at: Ms = 0
    extracted_messages: Annotated[int, Field(ge=0)] = 0
    summarized_messages: Annotated[int, Field(ge=0)] = 0


def _rows(model: Any) -> Any:
    return Annotated[list[model], Field(max_length=EXPORT_LIMITS["rows"])]


class ExportDocument(_Row):
    """A whole exported memory (``convmem-memory`` version 1)."""

    format: Literal["convmem-memory"]
    version: Literal[1]
    memory: ExportHead
    messages: _rows(ExportMessage)  # type: ignore[valid-type]
    fragments: _rows(ExportFragment)  # type: ignore[valid-type]
    variable_specs: _rows(ExportSpec)  # type: ignore[valid-type]
    variables: _rows(ExportVariable)  # type: ignore[valid-type]
    summary: ExportSummary | None = None
    audit: _rows(ExportAudit)  # type: ignore[valid-type]
    dead_letters: _rows(ExportDeadLetter)  # type: ignore[valid-type]


class ExportFormatError(ConvMemError, ValueError):
    """An import document does not match the export schema; nothing was written.

    Attributes:
        path: JSON path of the offending field (``$.messages[3].seq``).
        reason: What is wrong with it (never the value itself, which may be huge or secret).
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"convmem-memory: {path}: {reason}")


def _json_path(loc: tuple[int | str, ...]) -> str:
    path = "$"
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in {"str", "int"} or part.startswith(("list[", "function-after[", "constrained")):
            continue  # pydantic's union-member labels are not part of the document
        else:
            path += f".{part}"
    return path


def _reason(error: Mapping[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, InvalidIdentifierError):
        return cause.reason
    if error.get("type") == "extra_forbidden":
        return "unknown field (internal keys such as seq and row ids are assigned by the store)"
    # pydantic's own message, never its input echo: the value may be a secret or megabytes long.
    return str(error.get("msg", "invalid"))


def _unique(rows: list[Any], key: Any, path: str, what: str) -> None:
    seen: set[Any] = set()
    for i, row in enumerate(rows):
        k = key(row)
        if k in seen:
            raise ExportFormatError(f"$.{path}[{i}]", f"duplicate {what} {str(k)[:60]!r}")
        seen.add(k)


def parse_export(doc: object) -> ExportDocument:
    """Validate a whole export document; raise on the first problem, naming its JSON path.

    Raises:
        ExportFormatError: The document is not a valid ``convmem-memory`` export.
    """
    if not isinstance(doc, Mapping):
        raise ExportFormatError("$", "not a convmem export: the document must be a JSON object")
    if doc.get("format") != "convmem-memory":
        raise ExportFormatError("$.format", "not a convmem export: must be 'convmem-memory'")
    if doc.get("version") != 1:
        shown = str(doc.get("version"))[:20]
        raise ExportFormatError("$.version", f"unsupported export version {shown!r}, expected 1")
    try:
        parsed = ExportDocument.model_validate(dict(doc))
    except ValidationError as exc:
        first = exc.errors(include_input=False)[0]
        raise ExportFormatError(_json_path(tuple(first["loc"])), _reason(first)) from None
    _unique(parsed.messages, lambda m: m.id, "messages", "message id")
    _unique(parsed.fragments, lambda f: f.id, "fragments", "fragment id")
    _unique(parsed.variable_specs, lambda s: s.name, "variable_specs", "variable name")
    _unique(parsed.variable_specs, lambda s: s.position, "variable_specs", "position")
    _unique(parsed.variables, lambda v: (v.name, v.origin), "variables", "variable")
    for name in ("extracted_messages", "summarized_messages"):
        if getattr(parsed.memory, name) > len(parsed.messages):
            raise ExportFormatError(f"$.memory.{name}", f"exceeds the {len(parsed.messages)} messages")
    return parsed
