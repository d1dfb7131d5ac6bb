r"""The server's one input boundary: every request value is checked here before the store sees it.

What a request may carry into ``convmem serve`` (issue 21 item 1):

* **JSON bodies** are parsed by :func:`parse_json`: at most :data:`MAX_DEPTH` nested arrays and
  objects (1,000 levels raised ``RecursionError`` in the parser and in every walk after it), integers
  of at most :data:`MAX_INT_DIGITS` digits (5,000 digits raised in ``int()``), finite numbers only
  (``NaN``/``Infinity``/``1e400`` are not JSON and cannot be sent on).
* **Strings** (JSON keys and values, query values, form fields) hold no NUL and no lone surrogate
  (:func:`string_problem`): PostgreSQL refuses NUL in text, and a lone ``\udc00`` cannot be
  encoded as UTF-8 by any store.
* **Ids** (memory, node, fragment, task, agent ids) follow the package's one identifier rule,
  :func:`convmem_graph._ids.check_identifier`, length included: an id of 256 characters passed the
  old checks and failed in the store (``varchar(256)``) or the viewer.
* **Integer query parameters** are at most :data:`MAX_QUERY_INT` in size: ``?page=66843523535228174336``
  became an OFFSET past SQLite's 64 bits.

A failure is a :class:`BoundaryError` naming the field; :class:`BoundaryRoute` (the route class of
every router) turns it into a 4xx in the shape of the router's vendor (:meth:`BoundaryRoute.
boundary_response`). Routes that read their body themselves under a size cap (the proxy, the
webhooks) call :func:`parse_json` and :func:`check_strings` directly: a signed webhook delivery
that fails here is kept as failed and still answered 200 (a vendor retries a non-2xx).

Example:
    >>> parse_json(b'{"a": [1, "x"]}')
    {'a': [1, 'x']}
    >>> try:
    ...     check_strings({"messages": [{"content": "hi\u0000"}]})
    ... except BoundaryError as exc:
    ...     print(exc)
    messages[0].content: NUL (U+0000) at position 2 is not allowed
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, ClassVar

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from convmem_graph._ids import IdentifierKind, identifier_problem

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_QUERY_INT",
    "BoundaryError",
    "BoundaryRoute",
    "check_id",
    "check_strings",
    "openai_boundary_error",
    "parse_json",
    "safe_text",
    "string_problem",
]

#: Deepest nesting of arrays and objects in a JSON body. TRTC, Agora and OpenAI bodies nest under
#: 10 levels (an OpenAI ``tools`` JSON schema a few more); Python's parser fails near 1,000.
MAX_DEPTH = 64
#: Longest integer literal in a JSON body: room for any 64-bit value, signed or not.
MAX_INT_DIGITS = 20
#: Largest integer query parameter (pages, budgets, offsets): page x page size stays in 64 bits.
MAX_QUERY_INT = 10**9

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_INT_QUERY_TYPES = (int, int | None)


class BoundaryError(ValueError):
    """A request value the server does not take, naming its field.

    Args:
        field: The field: a JSON path (``messages[0].content``), a query or path parameter name.
        problem: What is wrong with it.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def string_problem(value: str) -> str | None:
    r"""Return why ``value`` cannot be stored (NUL, a lone surrogate), or None.

    Example:
        >>> string_problem("ok") is None, string_problem("a\ud800")
        (True, 'lone surrogate U+D800 at position 1 is not allowed')
    """
    found = _BAD_CHAR.search(value)
    if found is None:
        return None
    char = found.group()
    what = "NUL (U+0000)" if char == "\x00" else f"lone surrogate U+{ord(char):04X}"
    return f"{what} at position {found.start()} is not allowed"


def safe_text(text: str) -> str:
    r"""Return ``text`` with NUL and lone surrogates replaced by U+FFFD (for keeping a rejected body).

    Example:
        >>> safe_text("a\x00b")
        'a\ufffdb'
    """
    return _BAD_CHAR.sub("\ufffd", text)


def _parse_int(literal: str) -> int:
    # Hooked into json.loads: a 5,000-digit literal is refused before int() spends time on it.
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise BoundaryError("body", f"an integer of {len(literal)} digits (at most {MAX_INT_DIGITS})")
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise BoundaryError("body", f"number {literal[:40]} is out of range")
    return value


def _parse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and the upstream would refuse them.
    raise BoundaryError("body", f"{name} is not JSON")


def _path(node: tuple[Any, ...] | None) -> str:
    """Render a parent chain ``(parent, key)`` as ``a.b[0].c``."""
    parts: list[str] = []
    while node is not None:
        node, key = node
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    text = "".join(reversed(parts)).lstrip(".")
    return text or "body"


def check_strings(doc: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """Check a parsed JSON value: nesting depth, and every key and string value (no NUL, surrogate).

    An iterative walk (the value may be as deep as the parser allowed); the path of a field is built
    only when it fails.

    Raises:
        BoundaryError: Naming the first bad field's JSON path.
    """
    stack: list[tuple[Any, int, tuple[Any, ...] | None]] = [(doc, 0, None)]
    while stack:
        value, depth, node = stack.pop()
        if isinstance(value, str):
            problem = string_problem(value)
            if problem is not None:
                raise BoundaryError(_path(node), problem)
        elif isinstance(value, dict | list):
            if depth >= max_depth:
                raise BoundaryError(_path(node), f"nested deeper than {max_depth} levels")
            if isinstance(value, dict):
                for key, item in value.items():
                    problem = string_problem(key)
                    if problem is not None:
                        raise BoundaryError(_path((node, "<key>")), f"object key: {problem}")
                    stack.append((item, depth + 1, (node, key)))
            else:
                stack.extend((item, depth + 1, (node, i)) for i, item in enumerate(value))


def parse_json(raw: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse a request body under the boundary's limits and check its strings.

    Raises:
        BoundaryError: Not UTF-8 JSON, nested deeper than ``max_depth``, a number past the limits,
            or a string with NUL or a lone surrogate (the error names the field).

    Example:
        >>> try:
        ...     parse_json(b"[" * 1000 + b"]" * 1000)
        ... except BoundaryError as exc:
        ...     print(exc.field, "|", exc.problem)
        body | nested deeper than 64 levels
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundaryError("body", f"not UTF-8 (byte {exc.start})") from None
    try:
        doc = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except RecursionError:
        raise BoundaryError("body", f"nested deeper than {max_depth} levels") from None
    except BoundaryError:
        raise
    except ValueError as exc:
        raise BoundaryError("body", f"not JSON ({exc})") from None
    try:
        check_strings(doc, max_depth=max_depth)
    except BoundaryError as exc:
        if exc.problem.startswith("nested deeper"):
            raise BoundaryError("body", exc.problem) from None
        raise
    return doc


def check_id(value: Any, field: str, kind: IdentifierKind = "id") -> str:
    """Return ``value`` if it passes the identifier rule of ``kind``, else raise naming ``field``.

    Example:
        >>> check_id("u_1", "user_id", "memory_id")
        'u_1'
    """
    problem = identifier_problem(value, kind)
    if problem is not None:
        raise BoundaryError(field, problem)
    assert isinstance(value, str)
    return value


def openai_boundary_error(exc: BoundaryError, *, code: str = "invalid_request") -> JSONResponse:
    """A 400 in OpenAI's error shape, ``param`` naming the field."""
    body = {"error": {"message": str(exc), "type": "invalid_request_error", "param": exc.field, "code": code}}
    return JSONResponse(body, status_code=400)


def _is_json(request: Request) -> bool:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


class BoundaryRoute(APIRoute):
    """An ``APIRoute`` checking path, query and JSON body values before the endpoint runs.

    * path parameters: ids (kind from :attr:`id_kinds`, default ``id``), so a memory id of 256
      characters or with NUL never reaches the store;
    * query values: no NUL or lone surrogate; names in :attr:`id_kinds` by the identifier rule;
      declared ``int`` parameters at most :data:`MAX_QUERY_INT`;
    * a JSON body (when the route has one and :attr:`check_body`): :func:`parse_json`, and its
      top-level keys named in :attr:`id_kinds` by the identifier rule.

    A :class:`BoundaryError` (also one the endpoint raises) becomes :meth:`boundary_response`;
    subclasses answer in their vendor's shape. Set a subclass as a router's ``route_class``.
    """

    #: Parameter and top-level body names that are ids, with their identifier kind.
    id_kinds: ClassVar[Mapping[str, IdentifierKind]] = {
        "memory_id": "memory_id",
        "user_id": "memory_id",
        "task_id": "id",
        "agent_id": "id",
        "human_id": "id",
        "bot_id": "id",
    }
    #: Whether the route class reads and checks a JSON body (off for routes that read it capped).
    check_body: ClassVar[bool] = True
    #: Status codes every route of this class may answer, merged into the OpenAPI document.
    default_responses: ClassVar[Mapping[int | str, dict[str, Any]]] = {
        400: {"description": "A request value the server does not take (the message names the field)"}
    }

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        responses = dict(self.default_responses)
        if kwargs.get("dependencies"):
            # Every dependency of this app is a bearer-token check.
            responses.setdefault(401, {"description": "Missing or wrong bearer token"})
            responses.setdefault(403, {"description": "A token of another scope"})
        # A store write that waits past CONVMEM_SERVE_WRITE_TIMEOUT_S is answered 503 on any route.
        responses.setdefault(503, {"description": "Store busy: retry after Retry-After seconds"})
        responses.update(kwargs.pop("responses", None) or {})
        super().__init__(path, endpoint, responses=responses, **kwargs)
        self._int_queries = frozenset(
            p.alias for p in self.dependant.query_params if p.field_info.annotation in _INT_QUERY_TYPES
        )

    def boundary_response(self, request: Request, exc: BoundaryError) -> Response:
        """The answer to a failed check; FastAPI's ``{"detail": ...}`` shape by default."""
        return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=400)

    def id_kind(self, name: str) -> IdentifierKind:
        """The identifier kind of a path parameter (every path parameter is an id)."""
        return self.id_kinds.get(name, "id")

    def field_name(self, request: Request, name: str) -> str:
        """How the caller names parameter ``name`` in error messages (subclasses rename)."""
        return name

    async def check_request(self, request: Request) -> None:
        """Check the request's path, query and (JSON) body values; raise :class:`BoundaryError`."""
        for name, value in request.path_params.items():
            if isinstance(value, str):
                check_id(value, self.field_name(request, name), self.id_kind(name))
        for name, value in request.query_params.multi_items():
            field = self.field_name(request, name)
            problem = string_problem(name) or string_problem(value)
            if problem is not None:
                raise BoundaryError(field, problem)
            if name in self.id_kinds and value:
                check_id(value, field, self.id_kinds[name])
            if name in self._int_queries:
                digits = value.strip().lstrip("+-")
                # ASCII only: "²".isdigit() is True, and int("²") raises (FastAPI answers it 422).
                if (
                    digits.isascii()
                    and digits.isdigit()
                    and (len(digits) > 10 or int(digits) > MAX_QUERY_INT)
                ):
                    raise BoundaryError(field, f"must be at most {MAX_QUERY_INT}")
        if self.check_body and self.body_field is not None and _is_json(request):
            raw = await request.body()  # cached on the request: FastAPI reads the same bytes
            if raw.strip():
                doc = parse_json(raw)
                if isinstance(doc, dict):
                    for name, kind in self.id_kinds.items():
                        value = doc.get(name)
                        if value is not None and isinstance(value, str):
                            check_id(value, self.field_name(request, name), kind)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap FastAPI's handler: check first, and answer any :class:`BoundaryError` in shape."""
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                await self.check_request(request)
                return await handler(request)
            except BoundaryError as exc:
                return self.boundary_response(request, exc)

        return route
