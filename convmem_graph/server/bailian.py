"""A Bailian-compatible long-term memory API on top of :class:`~convmem_graph.memory.ConvMemory`.

Two generations of Alibaba Model Studio (百炼) memory APIs are served (spec: vendor-formats §4):

- Generation B under ``/api/v2/apps/memory``: ``POST /add``, ``POST /memory_nodes/search``,
  ``GET /memory_nodes``, ``GET|PATCH|DELETE /memory_nodes/{id}``, ``POST|GET /profile_schemas``,
  ``GET|PATCH|DELETE /profile_schemas/{id}``, ``GET /profile_schemas/{id}/user_profile``,
  ``DELETE /entities/user/{id}``. snake_case JSON; errors are ``{"request_id", "code", "message"}``.
- Generation A (``2023-12-29``, ROA): ``/{workspaceId}/memories[/{memoryId}[/memoryNodes[/{id}]]]``
  with ``maxResults``/``nextToken`` paging, inputs as query parameters (as Alibaba's generated
  client sends them), camelCase answers and the documented codes (``Memory.MemoryIdNotFound``,
  ``Memory.MemoryNodeNotFound``, ``Memory.MemoryNodeContentInvalid``).

Mapping: ``user_id`` and ``memoryId`` are the convmem memory id; a memory node is a fragment
(``memory_node_id`` = fragment id); profile attributes are variables (see
:mod:`convmem_graph.server.bailian_schemas`). Every change goes through the store API, so it is
audited like a CLI edit, and runs the lifecycle so variables and the call-start snapshot follow.
Decisions where Bailian's docs are silent are listed in the README ("Bailian-compatible API").
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, ClassVar, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from convmem_graph.errors import InvalidIdentifierError, MemoryNotFoundError, NotFoundError
from convmem_graph.memory import ConvMemory
from convmem_graph.models import FRAGMENT_MAX_CHARS, Fragment, VariableSpec
from convmem_graph.payloads.relevance import lexical_scores
from convmem_graph.server._boundary import MAX_QUERY_INT, BoundaryError, BoundaryRoute
from convmem_graph.server._http import token_matches
from convmem_graph.server.bailian_meta import NodeMetaStore
from convmem_graph.server.bailian_schemas import (
    ProfileSchema,
    ProfileSchemaStore,
    ProfileSchemaUpdate,
    variable_name,
)
from convmem_graph.store.browse import count_memories, find_fragment, set_description

__all__ = ["API_PREFIX", "BailianError", "build_router"]

logger = logging.getLogger(__name__)

#: Path prefix of the generation-B API.
API_PREFIX = "/api/v2/apps/memory"
_DESCRIPTION_MAX = 50
_DEFAULT_MAX_RESULTS = 20


class BailianError(Exception):
    """An error answered in the caller's generation's shape.

    Args:
        status: HTTP status.
        code: Bailian error code (``InvalidParameter``, ``Memory.MemoryIdNotFound`` ...).
        message: What was wrong, naming the field.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _request_id() -> str:
    return str(uuid.uuid4())


def _error_response(request: Request, exc: BailianError) -> JSONResponse:
    rid = _request_id()
    if request.url.path.startswith(API_PREFIX):
        body: dict[str, Any] = {"request_id": rid, "code": exc.code, "message": exc.message}
    else:  # generation A: the generated client reads code/message/requestId
        body = {"requestId": rid, "code": exc.code, "message": exc.message, "success": False}
    return JSONResponse(body, status_code=exc.status)


def _validation_message(exc: RequestValidationError | ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path"))
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


#: Generation A's names of the path parameters, in its error messages.
_GEN_A_NAMES = {"memory_id": "memoryId", "memory_node_id": "memoryNodeId", "workspace_id": "workspaceId"}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Success"},
    400: {"description": "InvalidParameter (the message names the field) or content invalid"},
    401: {"description": "InvalidApiKey: bearer token missing or wrong"},
    403: {"description": "A token of another scope (CONVMEM_PROXY_TOKEN)"},
    404: {"description": "Memory, node or profile schema not found"},
}


class _BailianRoute(BoundaryRoute):
    """Answers boundary, validation and store errors in Bailian's shapes instead of FastAPI's 422."""

    default_responses: ClassVar[Mapping[int | str, dict[str, Any]]] = {}

    def boundary_response(self, request: Request, exc: BoundaryError) -> Response:
        """``InvalidParameter`` in the caller's generation's shape, naming the field."""
        return _error_response(request, BailianError(400, "InvalidParameter", str(exc)))

    def field_name(self, request: Request, name: str) -> str:
        """Generation A says ``memoryId`` where the path says ``memory_id``."""
        return name if request.url.path.startswith(API_PREFIX) else _GEN_A_NAMES.get(name, name)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except BailianError as exc:
                return _error_response(request, exc)
            except (RequestValidationError, ValidationError) as exc:
                return _error_response(
                    request, BailianError(400, "InvalidParameter", _validation_message(exc))
                )
            except InvalidIdentifierError as exc:
                # The store says memory_id; the caller sent user_id (B) or memoryId (A).
                name = "user_id" if request.url.path.startswith(API_PREFIX) else "memoryId"
                message = str(exc).replace("memory_id", name, 1)
                return _error_response(request, BailianError(400, "InvalidParameter", message))

        return route


# -- generation B request bodies ----------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ChatMessage(_Body):
    """One message of an ``add`` or ``search`` body."""

    role: Literal["user", "assistant", "tool", "system"]
    content: str | list[dict[str, Any]]


class AddMemoryBody(_Body):
    """``POST /add``."""

    user_id: str = Field(min_length=1)
    messages: list[ChatMessage] | None = None
    custom_content: str | None = Field(default=None, min_length=1, max_length=FRAGMENT_MAX_CHARS)
    memory_library_id: str | None = None
    project_id: str | None = None
    profile_schema: str | None = None
    meta_data: dict[str, Any] | None = None


class SearchBody(_Body):
    """``POST /memory_nodes/search``."""

    user_id: str = Field(min_length=1)
    messages: list[ChatMessage] | None = None
    query: str | None = None
    top_k: int = Field(default=5, ge=1, le=100)
    min_score: float = Field(default=0.0, ge=0.0, le=1.0)
    memory_library_id: str | None = None
    project_id: str | None = None


class UpdateNodeBody(_Body):
    """``PATCH /memory_nodes/{memory_node_id}``."""

    custom_content: str = Field(min_length=1, max_length=FRAGMENT_MAX_CHARS)
    user_id: str | None = None
    memory_library_id: str | None = None
    meta_data: dict[str, Any] | None = None


def _text_of(content: str | list[dict[str, Any]]) -> str:
    # Only text parts carry memory; image parts are not stored (README).
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text" and p.get("text"))


def _node(
    fragment: Fragment, *, project_id: str | None = None, extra_meta: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "memory_node_id": fragment.id,
        "content": fragment.content,
        "timestamp": fragment.observed_at or fragment.created_at,
        "created_at": fragment.created_at,
        "updated_at": fragment.updated_at,
        "media_desc": "",
        "meta_data": {
            "category": fragment.category,
            "key": fragment.key,
            "origin": fragment.origin,
            "transient": fragment.transient,
            "expires_at": fragment.expires_at,
            "source_message_ids": fragment.source_message_ids,
            # The client's own keys (kept beside the fact); convmem's keys above win a clash.
            **{k: v for k, v in (extra_meta or {}).items() if k not in _OWN_META},
        },
        "project_id": project_id or "",
        "memory_type": "transient" if fragment.transient else "long_term",
        "status": fragment.status,
    }


#: meta_data keys a PATCH or an add may change among convmem's own.
_WRITABLE_META = frozenset({"category"})
#: convmem's own keys of a node's meta_data (the fact's columns); any other key is the client's.
_OWN_META = frozenset({"category", "key", "origin", "transient", "expires_at", "source_message_ids"})


def _check_meta(meta: dict[str, Any] | None, current: Fragment | None) -> tuple[str | None, dict[str, Any]]:
    """Split ``meta_data`` into the category to set and the client's own keys (kept beside the fact).

    Raises:
        BailianError: A read-only convmem key is changed, or the category is not a short string.
    """
    if not meta:
        return None, {}
    shown = _node(current)["meta_data"] if current is not None else {}
    free: dict[str, Any] = {}
    for key, value in meta.items():
        if key in _WRITABLE_META:
            continue
        if key not in _OWN_META:
            free[key] = value
            continue
        if key in shown and shown[key] == value:
            continue  # a client echoing a node's own meta_data back
        raise BailianError(
            400,
            "InvalidParameter",
            f"meta_data.{key}: set by convmem, read-only; of its keys only "
            f"{', '.join(sorted(_WRITABLE_META))} can be set",
        )
    category = meta.get("category")
    if category is not None and (not isinstance(category, str) or not category or len(category) > 32):
        raise BailianError(400, "InvalidParameter", "meta_data.category: a string of 1-32 characters")
    return category, free


def _token(settings: Any) -> str | None:
    secret = getattr(settings, "secret", None)
    if callable(secret):
        value = secret("token")
        return str(value) if value else None
    raw = getattr(settings, "token", None)
    if raw is None:
        return None
    plain = raw.get_secret_value() if hasattr(raw, "get_secret_value") else str(raw)
    return plain or None


class _Api:
    """The route handlers, bound to one ConvMemory."""

    def __init__(self, mem: ConvMemory, settings: Any) -> None:
        self.mem = mem
        self.token = _token(settings)
        self.schemas = ProfileSchemaStore(mem.store)
        self.meta = NodeMetaStore(mem.store)

    # -- shared ------------------------------------------------------------------------------
    def check_auth(self, request: Request) -> None:
        """Require the server's bearer token when one is set; accept any ``Bearer`` otherwise."""
        if self.token is not None and not token_matches(request.headers.get("authorization"), self.token):
            raise BailianError(401, "InvalidApiKey", "Authorization: Bearer <token> is missing or wrong")

    def live_fragments(self, memory_id: str) -> list[Fragment]:
        return self.mem.store.list_fragments(
            memory_id, status="active", include_expired=False, now_ms=self.mem.lifecycle.clock()
        )

    def node_fragment(self, node_id: str, user_id: str | None) -> Fragment:
        """The live fragment behind a node id (of ``user_id`` when given)."""
        try:
            fragment = (
                self.mem.store.get_fragment(user_id, node_id)
                if user_id
                else find_fragment(self.mem.store, node_id)
            )
        except (NotFoundError, ValueError):
            fragment = None
        if fragment is None or fragment.status == "deleted":
            raise BailianError(404, "MemoryNodeNotFound", f"memory_node_id {node_id!r} not found")
        return fragment

    def apply_schema(self, memory_id: str, schema_id: str) -> None:
        try:
            schema = self.schemas.get(schema_id)
        except NotFoundError as exc:
            raise BailianError(404, "ProfileSchemaNotFound", f"profile_schema: {exc}") from None
        from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS

        self.mem.store.ensure_memory(memory_id)
        specs = self.mem.store.get_specs(memory_id) or list(DEFAULT_VARIABLE_SPECS)
        names = {s.name for s in specs}
        added = [
            VariableSpec(name=variable_name(a.name), description=a.description or a.name)
            for a in schema.attributes
            if variable_name(a.name) not in names
        ]
        if added:
            self.mem.define_variables(memory_id, [*specs, *added])

    # -- generation B ------------------------------------------------------------------------
    def add(self, body: AddMemoryBody) -> dict[str, Any]:
        if not body.messages and not body.custom_content:
            raise BailianError(400, "InvalidParameter", "messages or custom_content is required")
        uid = body.user_id
        self.mem.store.ensure_memory(uid)
        if body.profile_schema:
            self.apply_schema(uid, body.profile_schema)
        before = {f.id: f.updated_at for f in self.mem.fragments(uid)}
        category, free = _check_meta(body.meta_data, None)
        if body.custom_content:
            self.mem.store.add_fragment(uid, body.custom_content, category=category or "other", origin="api")
        if body.messages:
            turns = [
                {"role": m.role, "content": _text_of(m.content)}
                for m in body.messages
                if m.role in ("user", "assistant") and _text_of(m.content).strip()
            ]
            if turns:
                self.mem.ingest(uid, turns, source="openai")
        if body.custom_content and not body.messages:
            self.mem.lifecycle.run(uid)  # variables follow the facts; the snapshot is rebuilt
        after = self.mem.fragments(uid)
        nodes = []
        for f in after:
            if f.id not in before:
                nodes.append({"memory_node_id": f.id, "content": f.content, "event": "ADD"})
            elif before[f.id] != f.updated_at:
                nodes.append({"memory_node_id": f.id, "content": f.content, "event": "UPDATE"})
        if free:
            # The client's keys go on the nodes this call added or changed.
            for node in nodes:
                self.store_meta(uid, node["memory_node_id"], free)
        gone = set(before) - {f.id for f in after}
        nodes.extend({"memory_node_id": i, "content": "", "event": "DELETE"} for i in sorted(gone))
        return {"request_id": _request_id(), "memory_nodes": nodes}

    def search(self, body: SearchBody) -> dict[str, Any]:
        query = body.query or " ".join(_text_of(m.content) for m in body.messages or [] if m.role != "system")
        if not query.strip():
            raise BailianError(400, "InvalidParameter", "messages or query is required")
        try:
            fragments = self.live_fragments(body.user_id)
        except ValueError as exc:
            raise BailianError(400, "InvalidParameter", f"user_id: {exc}") from None
        scores = lexical_scores(query, [f.content for f in fragments])
        best = max(scores.values(), default=0.0)
        ranked = sorted(scores, key=lambda i: (-scores[i], -fragments[i].updated_at))
        nodes = []
        for i in ranked:
            score = scores[i] / best if best > 0 else 0.0
            if score < body.min_score:
                continue
            nodes.append({**_node(fragments[i], project_id=body.project_id), "score": round(score, 4)})
            if len(nodes) >= body.top_k:
                break
        self.with_meta(body.user_id, nodes)
        return {"request_id": _request_id(), "memory_nodes": nodes}

    def list_nodes(self, user_id: str, page_num: int, page_size: int) -> dict[str, Any]:
        try:
            fragments = self.live_fragments(user_id)
        except ValueError as exc:
            raise BailianError(400, "InvalidParameter", f"user_id: {exc}") from None
        start = (page_num - 1) * page_size
        nodes = [_node(f) for f in fragments[start : start + page_size]]
        return {
            "request_id": _request_id(),
            "memory_nodes": self.with_meta(user_id, nodes),
            "total": len(fragments),
            "page_num": page_num,
            "page_size": page_size,
        }

    def update_node(self, node_id: str, body: UpdateNodeBody) -> dict[str, Any]:
        fragment = self.node_fragment(node_id, body.user_id)
        category, free = _check_meta(body.meta_data, fragment)
        if free:
            self.store_meta(fragment.memory_id, fragment.id, free)
        self.mem.update_fragment(
            fragment.memory_id, fragment.id, content=body.custom_content, category=category
        )
        return {"request_id": _request_id()}

    def delete_node(self, node_id: str, user_id: str | None) -> dict[str, Any]:
        fragment = self.node_fragment(node_id, user_id)
        self.mem.delete_fragment(fragment.memory_id, fragment.id)
        self.meta.forget(fragment.memory_id, fragment.id)
        return {"request_id": _request_id()}

    def node(self, node_id: str, user_id: str | None) -> dict[str, Any]:
        fragment = self.node_fragment(node_id, user_id)
        extra = self.meta.get_many(fragment.memory_id, [fragment.id]).get(fragment.id)
        return _node(fragment, extra_meta=extra)

    def store_meta(self, memory_id: str, node_id: str, free: Mapping[str, Any]) -> None:
        try:
            self.meta.merge(memory_id, node_id, free)
        except ValueError as exc:
            raise BailianError(400, "InvalidParameter", str(exc)) from None

    def with_meta(self, memory_id: str, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Add the client's own meta_data keys to ``nodes`` (in place; returned for chaining)."""
        extra = self.meta.get_many(memory_id, [n["memory_node_id"] for n in nodes])
        for n in nodes:
            for key, value in extra.get(n["memory_node_id"], {}).items():
                n["meta_data"].setdefault(key, value)
        return nodes

    # -- profile schemas ---------------------------------------------------------------------
    def schema_or_404(self, schema_id: str) -> ProfileSchema:
        try:
            return self.schemas.get(schema_id)
        except NotFoundError as exc:
            raise BailianError(404, "ProfileSchemaNotFound", str(exc)) from None

    def get_schema(self, schema_id: str) -> dict[str, Any]:
        schema = self.schema_or_404(schema_id)
        return {"request_id": _request_id(), "profile_schema_id": schema_id, **schema.model_dump()}

    def list_schemas(self, page_num: int, page_size: int) -> dict[str, Any]:
        page, total = self.schemas.page(offset=(page_num - 1) * page_size, limit=page_size)
        return {
            "request_id": _request_id(),
            "profile_schemas": [
                {"profile_schema_id": i, "name": s.name, "description": s.description} for i, s in page
            ],
            "total": total,
            "page_num": page_num,
            "page_size": page_size,
        }

    def update_schema(self, schema_id: str, body: ProfileSchemaUpdate) -> dict[str, Any]:
        try:
            self.schemas.update(schema_id, body)
        except NotFoundError as exc:
            raise BailianError(404, "ProfileSchemaNotFound", str(exc)) from None
        except ValueError as exc:
            raise BailianError(400, "InvalidParameter", str(exc)) from None
        return {"request_id": _request_id()}

    def delete_schema(self, schema_id: str) -> dict[str, Any]:
        if not self.schemas.delete(schema_id):
            raise BailianError(404, "ProfileSchemaNotFound", f"profile schema {schema_id!r} not found")
        return {"request_id": _request_id()}

    def delete_entity(self, entity_type: str, entity_id: str) -> dict[str, Any]:
        if entity_type != "user":
            raise BailianError(400, "InvalidParameter", f"entity_type: {entity_type!r} is not 'user'")
        try:
            existed = self.mem.delete(entity_id)
        except ValueError as exc:
            raise BailianError(400, "InvalidParameter", f"entity_id: {exc}") from None
        if not existed:
            raise BailianError(404, "EntityNotFound", f"user {entity_id!r} not found")
        return {"request_id": _request_id()}

    def user_profile(self, schema_id: str, user_id: str) -> dict[str, Any]:
        try:
            schema = self.schemas.get(schema_id)
        except NotFoundError as exc:
            raise BailianError(404, "ProfileSchemaNotFound", str(exc)) from None
        try:
            values = self.mem.variables(user_id)
        except ValueError as exc:
            raise BailianError(400, "InvalidParameter", f"user_id: {exc}") from None
        attributes = []
        for attr in schema.attributes:
            name = variable_name(attr.name)
            v = values.get(name)
            value = "" if v is None else (",".join(v.value) if isinstance(v.value, list) else str(v.value))
            attributes.append({"id": attr.attribute_id, "name": attr.name, "value": value, "variable": name})
        return {
            "request_id": _request_id(),
            "profile": {
                "schema_name": schema.name,
                "schema_description": schema.description,
                "attributes": attributes,
            },
        }

    # -- generation A ------------------------------------------------------------------------
    def memory_or_404(self, memory_id: str) -> None:
        try:
            self.mem.info(memory_id)
        except (MemoryNotFoundError, ValueError):
            raise BailianError(404, "Memory.MemoryIdNotFound", f"memoryId {memory_id!r} not found") from None

    def node_or_404(self, memory_id: str, node_id: str) -> Fragment:
        self.memory_or_404(memory_id)
        try:
            fragment = self.mem.store.get_fragment(memory_id, node_id)
        except NotFoundError:
            fragment = None
        if fragment is None or fragment.status == "deleted":
            raise BailianError(404, "Memory.MemoryNodeNotFound", f"memoryNodeId {node_id!r} not found")
        return fragment


def _content_a(content: str | None) -> str:
    if content is None or not content.strip() or len(content) > FRAGMENT_MAX_CHARS:
        raise BailianError(
            400, "Memory.MemoryNodeContentInvalid", f"content: 1-{FRAGMENT_MAX_CHARS} characters required"
        )
    return content


def _description_a(description: str | None) -> str:
    description = description or ""
    if len(description) > _DESCRIPTION_MAX:
        raise BailianError(400, "InvalidParameter", f"description: at most {_DESCRIPTION_MAX} characters")
    return description


def _offset(next_token: str | None) -> int:
    if not next_token:
        return 0
    try:
        value = int(next_token)
    except ValueError:
        value = -1
    if value < 0 or value > MAX_QUERY_INT:  # a huge offset overflows SQLite's 64-bit OFFSET
        raise BailianError(400, "InvalidParameter", f"nextToken {next_token!r} was not issued by this server")
    return value


def _page(offset: int, size: int, total: int) -> str | None:
    return str(offset + size) if offset + size < total else None


def build_router(mem: ConvMemory, settings: Any = None) -> APIRouter:
    """Return the Bailian-compatible routes (generations A and B) bound to ``mem``.

    Args:
        mem: The memory the API reads and writes.
        settings: Server settings; its ``token`` (when set) is the required bearer token.

    Example:
        >>> mem = ConvMemory.open("sqlite://")
        >>> sorted({r.path.removeprefix(API_PREFIX) for r in build_router(mem).routes})[:3]
        ['/add', '/entities/{entity_type}/{entity_id}', '/memory_nodes']
        >>> mem.close()
    """
    api = _Api(mem, settings)
    router = APIRouter(route_class=_BailianRoute, tags=["Bailian-compatible memory"], responses=_RESPONSES)

    async def call(request: Request, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        api.check_auth(request)
        # Store calls and lifecycle runs block: keep them off the event loop.
        return await run_in_threadpool(fn, *args)

    # -- generation B ------------------------------------------------------------------------
    @router.post(f"{API_PREFIX}/add", summary="AddMemory")
    async def add_memory(request: Request, body: AddMemoryBody) -> dict[str, Any]:
        return await call(request, api.add, body)

    @router.post(f"{API_PREFIX}/memory_nodes/search", summary="SearchMemory")
    async def search_memory(request: Request, body: SearchBody) -> dict[str, Any]:
        return await call(request, api.search, body)

    @router.get(f"{API_PREFIX}/memory_nodes", summary="ListMemory")
    async def list_memory(
        request: Request,
        user_id: str = Query(min_length=1),
        page_num: int = Query(1, ge=1),
        page_size: int = Query(10, ge=1, le=100),
        memory_library_id: str | None = None,
        project_id: str | None = None,
    ) -> dict[str, Any]:
        return await call(request, api.list_nodes, user_id, page_num, page_size)

    @router.get(f"{API_PREFIX}/memory_nodes/{{memory_node_id}}", summary="GetMemoryNode")
    async def get_memory_node(
        request: Request, memory_node_id: str, user_id: str | None = None
    ) -> dict[str, Any]:
        def get() -> dict[str, Any]:
            node = api.node(memory_node_id, user_id)
            return {
                "request_id": _request_id(),
                "memory_node": {**node, "media_urls": [], "multimodal_medias": []},
            }

        return await call(request, get)

    @router.patch(f"{API_PREFIX}/memory_nodes/{{memory_node_id}}", summary="UpdateMemory")
    async def update_memory_node(
        request: Request, memory_node_id: str, body: UpdateNodeBody
    ) -> dict[str, Any]:
        return await call(request, api.update_node, memory_node_id, body)

    @router.delete(f"{API_PREFIX}/memory_nodes/{{memory_node_id}}", summary="DeleteMemory")
    async def delete_memory_node(
        request: Request, memory_node_id: str, user_id: str | None = None
    ) -> dict[str, Any]:
        return await call(request, api.delete_node, memory_node_id, user_id)

    @router.post(f"{API_PREFIX}/profile_schemas", summary="CreateProfileSchema")
    async def create_profile_schema(request: Request, body: ProfileSchema) -> dict[str, Any]:
        def create() -> dict[str, Any]:
            return {"request_id": _request_id(), "profile_schema_id": api.schemas.create(body)}

        return await call(request, create)

    @router.get(f"{API_PREFIX}/profile_schemas", summary="ListProfileSchemas")
    async def list_profile_schemas(
        request: Request,
        page_num: int = Query(1, ge=1, le=MAX_QUERY_INT),
        page_size: int = Query(10, ge=1, le=100),
        memory_library_id: str | None = None,
    ) -> dict[str, Any]:
        return await call(request, api.list_schemas, page_num, page_size)

    @router.get(f"{API_PREFIX}/profile_schemas/{{profile_schema_id}}", summary="GetProfileSchema")
    async def get_profile_schema(
        request: Request, profile_schema_id: str, memory_library_id: str | None = None
    ) -> dict[str, Any]:
        return await call(request, api.get_schema, profile_schema_id)

    @router.patch(f"{API_PREFIX}/profile_schemas/{{profile_schema_id}}", summary="UpdateProfileSchema")
    async def update_profile_schema(
        request: Request, profile_schema_id: str, body: ProfileSchemaUpdate
    ) -> dict[str, Any]:
        return await call(request, api.update_schema, profile_schema_id, body)

    @router.delete(f"{API_PREFIX}/profile_schemas/{{profile_schema_id}}", summary="DeleteProfileSchema")
    async def delete_profile_schema(
        request: Request, profile_schema_id: str, memory_library_id: str | None = None
    ) -> dict[str, Any]:
        return await call(request, api.delete_schema, profile_schema_id)

    @router.delete(f"{API_PREFIX}/entities/{{entity_type}}/{{entity_id}}", summary="DeleteEntity")
    async def delete_entity(
        request: Request, entity_type: str, entity_id: str, memory_library_id: str | None = None
    ) -> dict[str, Any]:
        return await call(request, api.delete_entity, entity_type, entity_id)

    @router.get(f"{API_PREFIX}/profile_schemas/{{profile_schema_id}}/user_profile", summary="GetUserProfile")
    async def get_user_profile(
        request: Request,
        profile_schema_id: str,
        user_id: str = Query(min_length=1),
        memory_library_id: str | None = None,
    ) -> dict[str, Any]:
        return await call(request, api.user_profile, profile_schema_id, user_id)

    # -- generation A ------------------------------------------------------------------------
    @router.post("/{workspace_id}/memories", summary="CreateMemory")
    async def create_memory(
        request: Request, workspace_id: str, description: str | None = None
    ) -> dict[str, Any]:
        def create() -> dict[str, Any]:
            info = mem.store.create_memory(description=_description_a(description))
            return {"memoryId": info.memory_id, "requestId": _request_id()}

        return await call(request, create)

    @router.get("/{workspace_id}/memories", summary="ListMemories")
    async def list_memories(
        request: Request,
        workspace_id: str,
        maxResults: int = Query(_DEFAULT_MAX_RESULTS, ge=1, le=100),  # noqa: N803 - Bailian's name
        nextToken: str | None = None,  # noqa: N803
    ) -> dict[str, Any]:
        def list_() -> dict[str, Any]:
            offset = _offset(nextToken)
            total = count_memories(mem.store)
            page = mem.memories(limit=maxResults, offset=offset)
            return {
                "maxResults": maxResults,
                "memories": [{"description": m.description, "memoryId": m.memory_id} for m in page],
                "nextToken": _page(offset, maxResults, total),
                "requestId": _request_id(),
                "totalCount": total,
                "workspaceId": workspace_id,
            }

        return await call(request, list_)

    @router.get("/{workspace_id}/memories/{memory_id}", summary="GetMemory")
    async def get_memory(request: Request, workspace_id: str, memory_id: str) -> dict[str, Any]:
        def get() -> dict[str, Any]:
            api.memory_or_404(memory_id)
            info = mem.info(memory_id)
            return {
                "description": info.description,
                "memoryId": memory_id,
                "requestId": _request_id(),
                "workspaceId": workspace_id,
            }

        return await call(request, get)

    @router.put("/{workspace_id}/memories/{memory_id}", summary="UpdateMemory")
    async def update_memory(
        request: Request, workspace_id: str, memory_id: str, description: str | None = None
    ) -> dict[str, Any]:
        def update() -> dict[str, Any]:
            api.memory_or_404(memory_id)
            set_description(mem.store, memory_id, _description_a(description))
            return {"requestId": _request_id()}

        return await call(request, update)

    @router.delete("/{workspace_id}/memories/{memory_id}", summary="DeleteMemory")
    async def delete_memory(request: Request, workspace_id: str, memory_id: str) -> dict[str, Any]:
        def delete() -> dict[str, Any]:
            api.memory_or_404(memory_id)
            mem.delete(memory_id)
            return {"requestId": _request_id()}

        return await call(request, delete)

    @router.post("/{workspace_id}/memories/{memory_id}/memoryNodes", summary="CreateMemoryNode")
    async def create_memory_node(
        request: Request, workspace_id: str, memory_id: str, content: str | None = None
    ) -> dict[str, Any]:
        def create() -> dict[str, Any]:
            api.memory_or_404(memory_id)
            fragment = mem.store.add_fragment(memory_id, _content_a(content), origin="api")
            mem.lifecycle.run(memory_id)
            return {"memoryNodeId": fragment.id, "requestId": _request_id()}

        return await call(request, create)

    @router.get("/{workspace_id}/memories/{memory_id}/memoryNodes", summary="ListMemoryNodes")
    async def list_memory_nodes(
        request: Request,
        workspace_id: str,
        memory_id: str,
        maxResults: int = Query(_DEFAULT_MAX_RESULTS, ge=1, le=100),  # noqa: N803
        nextToken: str | None = None,  # noqa: N803
    ) -> dict[str, Any]:
        def list_() -> dict[str, Any]:
            api.memory_or_404(memory_id)
            offset = _offset(nextToken)
            fragments = api.live_fragments(memory_id)
            page = fragments[offset : offset + maxResults]
            return {
                "maxResults": maxResults,
                "memoryNodes": [{"content": f.content, "memoryNodeId": f.id} for f in page],
                "nextToken": _page(offset, maxResults, len(fragments)),
                "requestId": _request_id(),
                "totalCount": len(fragments),
            }

        return await call(request, list_)

    @router.get("/{workspace_id}/memories/{memory_id}/memoryNodes/{memory_node_id}", summary="GetMemoryNode")
    async def get_memory_node_a(
        request: Request, workspace_id: str, memory_id: str, memory_node_id: str
    ) -> dict[str, Any]:
        def get() -> dict[str, Any]:
            fragment = api.node_or_404(memory_id, memory_node_id)
            return {
                "content": fragment.content,
                "memoryNodeId": fragment.id,
                "requestId": _request_id(),
                "workspaceId": workspace_id,
            }

        return await call(request, get)

    @router.put(
        "/{workspace_id}/memories/{memory_id}/memoryNodes/{memory_node_id}", summary="UpdateMemoryNode"
    )
    async def update_memory_node_a(
        request: Request, workspace_id: str, memory_id: str, memory_node_id: str, content: str | None = None
    ) -> dict[str, Any]:
        def update() -> dict[str, Any]:
            api.node_or_404(memory_id, memory_node_id)
            mem.update_fragment(memory_id, memory_node_id, content=_content_a(content))
            return {"requestId": _request_id()}

        return await call(request, update)

    @router.delete(
        "/{workspace_id}/memories/{memory_id}/memoryNodes/{memory_node_id}", summary="DeleteMemoryNode"
    )
    async def delete_memory_node_a(
        request: Request, workspace_id: str, memory_id: str, memory_node_id: str
    ) -> dict[str, Any]:
        def delete() -> dict[str, Any]:
            api.node_or_404(memory_id, memory_node_id)
            mem.delete_fragment(memory_id, memory_node_id)
            return {"requestId": _request_id()}

        return await call(request, delete)

    return router
