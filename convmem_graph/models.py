"""Domain types of convmem_graph (design section 3), as validated pydantic v2 models.

Nothing here knows a vendor's field names: ``sources/`` produce these types and ``payloads/``
consume them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

__all__ = [
    "Channel",
    "EpisodeHit",
    "EpisodeSearch",
    "FRAGMENT_MAX_CHARS",
    "LONG_FRAGMENT_MAX_CHARS",
    "ExtractionResult",
    "Fragment",
    "FragmentCandidate",
    "FragmentOp",
    "FragmentStatus",
    "MemoryInfo",
    "MemorySnapshot",
    "Message",
    "ReadResult",
    "Role",
    "SkippedItem",
    "Summary",
    "VariableGuess",
    "VariableSpec",
    "VariableValue",
    "VariableValueType",
]

Role = Literal["user", "assistant"]
Channel = Literal["im", "voice", "api"]
FragmentStatus = Literal["active", "superseded", "deleted"]
VariableValueType = str | int | list[str]

#: Longest fragment we keep; Bailian caps MemoryNode content at 200 characters too.
FRAGMENT_MAX_CHARS = 200
#: Longest text ``add_long_fragment`` splits into linked fragments (ten pieces or so).
LONG_FRAGMENT_MAX_CHARS = 2_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Message(_Model):
    """One normalized conversation message.

    ``id`` is derived from the source's own key (IM ``MsgKey``, TRTC ``TaskId``+``RoundId``+speaker,
    Agora agent id + index ...), so reading the same payload twice gives the same id.
    ``content`` of an interrupted assistant message is what was actually spoken; the full generated
    text is in ``original``.
    """

    id: str = Field(min_length=1)
    memory_id: str = ""
    role: Role
    content: str
    channel: Channel
    source: str = Field(min_length=1, description="asr, message, command, llm, greeting, chatbot, ...")
    timestamp_ms: int = Field(ge=0)
    turn_id: int | None = None
    round_id: str | None = None
    speaker_id: str | None = None
    partial: bool = False
    interrupted: bool = False
    original: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class SkippedItem(_Model):
    """An input item that was read but not turned into a message, and why."""

    reason: str = Field(min_length=1, description="short machine-readable reason, e.g. 'recalled'")
    path: str = Field(description="JSON path of the item in its payload, e.g. 'MsgList[5]'")
    detail: str = ""


class ReadResult(_Model):
    """What a source reader returns: messages in the payload's order plus skipped items."""

    source: str
    messages: list[Message] = Field(default_factory=list)
    skipped: list[SkippedItem] = Field(default_factory=list)
    user_id: str | None = Field(default=None, description="the human's account/uid found in the payload")
    memory_id: str | None = Field(default=None, description="an explicit memory id found (e.g. Agora labels)")
    session_ended: bool = Field(
        default=False,
        description="the payload says its session ended (TRTC 902): the run refreshes the summary",
    )
    interruptions: list[tuple[str, str]] = Field(
        default_factory=list,
        description="TRTC (TaskId, RoundId) pairs an interruption metric (906/908) named: the store "
        "marks that round's bot turn, stored before or after, in this run or another",
    )


class Fragment(_Model):
    """A long-term personal fact in the third person ("User is allergic to mango")."""

    id: str = Field(min_length=1)
    memory_id: str
    content: str = Field(min_length=1, max_length=FRAGMENT_MAX_CHARS)
    category: str = "other"
    key: str = Field(min_length=1, description="normalized subject used for dedupe and conflicts")
    status: FragmentStatus = "active"
    transient: bool = False
    expires_at: int | None = Field(default=None, ge=0, description="ms UTC; set for transient facts")
    source_message_ids: list[str] = Field(default_factory=list)
    origin: Literal["extracted", "manual", "api"] = "extracted"
    superseded_by: str | None = None
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    created_at: int = Field(default=0, ge=0)
    updated_at: int = Field(default=0, ge=0)
    #: When the fact was last stated (ms of the newest source message). Unlike ``updated_at``
    #: it does not depend on when or in how many runs an archive was ingested.
    observed_at: int = Field(default=0, ge=0)
    #: A fact longer than a fragment may hold is stored as linked pieces (see
    #: ``ConvMemory.add_long_fragment``): the id of its first piece, on every piece.
    part_of: str | None = None
    #: This piece's place in ``part_of``, from 0; the memory block injects the pieces together.
    part: int | None = Field(default=None, ge=0)


class FragmentCandidate(_Model):
    """A fact proposed by an extractor, before reconciliation against stored fragments.

    ``key`` names the slot (``allergy:mango``, ``profile:city``); ``value`` is the slot's value
    where it has one (``杭州``) and ``polarity`` is -1 for negative statements (dislike, avoid), so
    reconciliation can tell a refinement from a contradiction.
    """

    content: str = Field(min_length=1, max_length=FRAGMENT_MAX_CHARS)
    category: str = "other"
    key: str = Field(min_length=1)
    value: str | None = None
    polarity: Literal[-1, 1] = 1
    single_valued: bool = False
    transient: bool = False
    expires_at: int | None = Field(default=None, ge=0)
    source_message_ids: list[str] = Field(default_factory=list)
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    observed_at: int = Field(default=0, ge=0, description="ms of the newest source message")


class FragmentOp(_Model):
    """A reconciliation decision for one candidate."""

    op: Literal["add", "update", "supersede", "noop"]
    candidate: FragmentCandidate
    target_id: str | None = Field(default=None, description="existing fragment updated/superseded/matched")
    reason: str = ""


class VariableSpec(_Model):
    """One profile field of a memory's variable schema (Bailian "memory variable")."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    description: str = ""
    infer: bool = True
    type: Literal["string", "integer", "list"] = "string"
    allowed_values: list[str] | None = None


class VariableValue(_Model):
    """The current value of one variable. A manual value is never overwritten by inference."""

    name: str
    value: VariableValueType
    origin: Literal["inferred", "manual"]
    fragment_ids: list[str] = Field(default_factory=list)
    updated_at: int = Field(default=0, ge=0)


class VariableGuess(_Model):
    """A value proposed for a variable by inference, with the fragments that support it."""

    value: VariableValueType
    fragment_ids: list[str] = Field(default_factory=list)


class ExtractionResult(_Model):
    """What an extractor returns for one batch of messages."""

    candidates: list[FragmentCandidate] = Field(default_factory=list)
    variables: dict[str, VariableGuess] = Field(default_factory=dict)
    model_calls: int = 0


class Summary(_Model):
    """The rolling summary of a memory, kept within a token budget."""

    text: str
    tokens: int = Field(ge=0)
    covers_until_ms: int = Field(ge=0)
    version: int = Field(default=1, ge=1)
    updated_at: int = Field(default=0, ge=0)
    #: ``model``: written by a model from the transcript; ``extractive``: assembled from variables
    #: and fragments without a model (it restates them, so memory blocks leave it out).
    origin: Literal["model", "extractive"] = "model"


class MemoryInfo(_Model):
    """A memory (the isolation unit, Bailian's Memory ID) and its counters."""

    memory_id: str
    description: str = ""
    created_at: int = 0
    updated_at: int = 0
    message_count: int = 0
    fragment_count: int = 0


class EpisodeHit(_Model):
    """A stored turn the episodic index found for a query, with the query terms it holds.

    ``reply_to`` is set on the turn that answered a found turn (the other speaker's next message):
    "Which one is your favourite?" matches a question, the answer is in the reply.
    """

    seq: int
    message: Message
    terms: list[str] = Field(default_factory=list)
    reply_to: int | None = None


class EpisodeSearch(_Model):
    """What an episodic search found: candidate turns and the statistics to score them.

    Attributes:
        terms: The query terms searched, oldest to newest.
        document_frequency: Term -> how many of the memory's turns hold it (capped: a term at the
            cap is common).
        total: Messages of the memory (capped), the ``N`` of BM25's IDF.
        hits: Candidate turns, best candidates first by the IDF of the terms they hold.
        dense: Seq -> cosine similarity to the query, for the turns found by their vectors (with
            an embeddings model; see :mod:`convmem_graph.store._vectors`).
    """

    terms: list[str] = Field(default_factory=list)
    document_frequency: dict[str, int] = Field(default_factory=dict)
    total: int = 0
    hits: list[EpisodeHit] = Field(default_factory=list)
    dense: dict[int, float] = Field(default_factory=dict)


class _Derived:
    """Values computed from a snapshot's fields (term counts, cleaned texts), kept with the snapshot.

    A cache, not state: the stores hand out one parsed snapshot per row text (to be treated as
    read-only), so what a call start derives from it is computed once per version of the row
    and dropped with it. Entries are keyed by their inputs (a text, or the identity of the
    field they were computed from), so assigning a field later does not leave a stale entry.
    Shallow copies (``model_copy``, as a call start's ``with_episodes``) share it; deep copies
    start empty. Any two compare equal: a cache never makes two equal snapshots unequal.
    """

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Derived)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by kind only

    def __deepcopy__(self, memo: dict[int, Any]) -> _Derived:
        return _Derived()


class MemorySnapshot(_Model):
    """Everything the payload builders need for one memory, read in one go at call start.

    ``episodes`` is not part of the cached snapshot: it holds the stored turns found for the
    current query (``ConvMemory.payload`` searches the episodic index and attaches them).
    """

    # A default, not a default_factory: pydantic deep-copies a private default per instance (a
    # new empty cache, by ``_Derived.__deepcopy__``), while a factory has its signature inspected
    # on every instance (~25-40 us, twice each: most of what making a snapshot cost).
    _derived: _Derived = PrivateAttr(default=_Derived())

    memory_id: str
    variables: dict[str, VariableValue] = Field(default_factory=dict)
    specs: dict[str, VariableSpec] = Field(default_factory=dict)
    fragments: list[Fragment] = Field(default_factory=list)
    summary: Summary | None = None
    recent: list[Message] = Field(default_factory=list)
    episodes: EpisodeSearch | None = Field(default=None, exclude=True)
    #: With an embeddings model: the stored vectors of ``fragments`` (by id) made from their current
    #: text, attached per call like ``episodes`` (facts without one rank by their words).
    fact_vectors: dict[str, Any] | None = Field(default=None, exclude=True)

    @field_validator("fragments")
    @classmethod
    def _only_active(cls, v: list[Fragment]) -> list[Fragment]:
        return [f for f in v if f.status == "active"]

    def derived(self) -> dict[str, Any]:
        """The payload builders' cache of values computed from this snapshot (see ``_Derived``).

        Keyed by the builder's own names; its copies made with ``model_copy`` share it.
        """
        # Read from pydantic's private slot: the attribute goes through ``BaseModel.__getattr__``
        # (~2-5 us, several times per call start), the slot costs a dict look-up.
        private = self.__pydantic_private__
        kept = private.get("_derived") if private else None
        if kept is None:
            return self._derived.values  # pydantic's own path (and its error) for anything else
        values: dict[str, Any] = kept.values
        return values
