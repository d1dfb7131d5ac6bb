"""The viewer's routes: ``build_router(mem, settings)`` for ``convmem serve`` and ``convmem view``.

Pages (GET, plain HTML, links carry the memory id in their path):

- ``/``: memories, searchable by id (``?q=``), paged (``?page=``);
- ``/memories/{id}``: one memory (``?fact=`` lights up a fact's messages, ``?before=`` /
  ``?after=`` page the timeline);
- ``/memories/{id}/inject``: the inject preview (``?vendor=&query=&persona=&budget=&options=``);
- ``/memories/{id}/lifecycle``: the lifecycle graph and the last run;
- ``/memories/{id}/delete``: the confirmation page.

Edits (POST forms, answered with a 303 back to the page): ``/memories/{id}/variables``
(``action=set|clear``), ``/memories/{id}/fragments/{fid}/edit`` and ``/delete``, and
``/memories/{id}/delete`` (the id typed again as ``confirm``). They go through ConvMemory and the
store, so each is audited like a CLI edit. A POST from another site (``Sec-Fetch-Site`` other than
``same-origin``, or else an ``Origin`` of another host) is refused (another page open in the same
browser must not edit a local memory).

Every value goes through the server's input boundary (:mod:`convmem_graph.server._boundary`):
memory and fragment ids by the identifier rule, no NUL in a query or form value, pages at most
``MAX_QUERY_INT``; a failure is a 400 page naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from convmem_graph.errors import MemoryNotFoundError, NotFoundError
from convmem_graph.memory import ConvMemory
from convmem_graph.models import FRAGMENT_MAX_CHARS, VariableValueType
from convmem_graph.server._boundary import BoundaryError, BoundaryRoute, string_problem
from convmem_graph.viewer._html import STATIC_PREFIX, esc, layout, memory_url, query_url
from convmem_graph.viewer.explore import SearchFilters, graph_page, search_page
from convmem_graph.viewer.inject import inject_page
from convmem_graph.viewer.lifecycle import lifecycle_page
from convmem_graph.viewer.pages import memories_page, memory_page

__all__ = ["build_router"]

_STATIC = {"viewer.css": "text/css; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8"}
_LIST_SPLIT = re.compile(r"\s*[,，、;；]\s*")


class _PageError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error_page(status: int, message: str) -> HTMLResponse:
    title = "Not found" if status == 404 else "Cannot do that"
    body = f'<h1>{esc(title)}</h1><p class="error">{esc(message)}</p><p><a href="/">all memories</a></p>'
    return HTMLResponse(layout(title, body), status_code=status)


_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "An HTML page"},
    303: {"description": "An edit was made: back to the page"},
    400: {"description": "A bad value (the page names the field)"},
    403: {"description": "A form sent from another site, or a token of another scope"},
    404: {"description": "No such memory or fact"},
}


class _ViewerRoute(BoundaryRoute):
    """Boundary failures as the viewer's 400 page."""

    default_responses: ClassVar[Mapping[int | str, dict[str, Any]]] = {}

    def boundary_response(self, request: Request, exc: BoundaryError) -> Response:
        """The viewer's error page naming the field."""
        return _error_page(400, str(exc))


async def _form(request: Request) -> dict[str, str]:
    """Read a plain urlencoded form (no multipart parser needed); NUL in a field is refused."""
    raw = (await request.body()).decode("utf-8", "replace")
    form = {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}
    for name, value in form.items():
        problem = string_problem(name) or string_problem(value)
        if problem is not None:
            raise BoundaryError(name, problem)
    return form


def _same_origin(request: Request) -> bool:
    # A browser's Sec-Fetch-Site cannot be set by a page; it is the only signal left on a same-origin
    # POST, whose Origin is "null" under the server's Referrer-Policy: no-referrer.
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def _parse_value(mem: ConvMemory, memory_id: str, name: str, raw: str) -> VariableValueType:
    specs = {s.name: s for s in mem.store.get_specs(memory_id)}
    if not specs:
        from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS

        specs = {s.name: s for s in DEFAULT_VARIABLE_SPECS}
    spec = specs.get(name)
    raw = raw.strip()
    if not raw:
        raise _PageError(400, f"variable {name!r}: a value is required (use 'clear manual' to clear it)")
    if spec is not None and spec.type == "integer":
        try:
            return int(raw)
        except ValueError:
            raise _PageError(400, f"variable {name!r}: an integer is expected, got {raw!r}") from None
    if spec is not None and spec.type == "list":
        return [part for part in _LIST_SPLIT.split(raw) if part]
    return raw


def build_router(mem: ConvMemory, settings: Any = None) -> APIRouter:
    """Return the viewer's routes bound to ``mem``.

    Args:
        mem: The memory shown and edited.
        settings: Server settings (unused by the pages; the app applies its token).

    Example:
        >>> mem = ConvMemory.open("sqlite://")
        >>> "/memories/{memory_id:path}" in {r.path for r in build_router(mem).routes}
        True
        >>> mem.close()
    """
    router = APIRouter(tags=["viewer"], route_class=_ViewerRoute, responses=_RESPONSES)

    async def render(fn: Any, *args: Any, **kwargs: Any) -> Response:
        try:
            return HTMLResponse(await run_in_threadpool(fn, *args, **kwargs))
        except MemoryNotFoundError as exc:
            return _error_page(404, str(exc))
        except _PageError as exc:
            return _error_page(exc.status, exc.message)

    async def edit(request: Request, fn: Any, *args: Any) -> Response:
        if not _same_origin(request):
            return _error_page(403, "this form was sent from another site; open the viewer and try again")
        try:
            target: str = await run_in_threadpool(fn, *args)
        except (MemoryNotFoundError, NotFoundError) as exc:
            return _error_page(404, str(exc).strip("'\""))
        except _PageError as exc:
            return _error_page(exc.status, exc.message)
        except ValueError as exc:
            return _error_page(400, str(exc))
        return RedirectResponse(target, status_code=303)

    @router.get(f"{STATIC_PREFIX}/{{name}}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in _STATIC:
            return Response("not found", status_code=404, media_type="text/plain")
        data = resources.files("convmem_graph.viewer").joinpath("static", name).read_bytes()
        return Response(data, media_type=_STATIC[name], headers={"Cache-Control": "no-cache"})

    @router.get("/", response_class=HTMLResponse, summary="Memories")
    async def index(q: str = "", page: int = 1, notice: str = "") -> Response:
        return await render(memories_page, mem, q=q, page=max(1, page), notice=notice)

    @router.post("/memories/{memory_id:path}/fragments", summary="Add a fact")
    async def add_fragment(request: Request, memory_id: str) -> Response:
        form = await _form(request)

        def run() -> str:
            content = form.get("content", "").strip()
            category = form.get("category", "").strip() or "other"
            if not content or len(content) > FRAGMENT_MAX_CHARS:
                raise _PageError(400, f"a fact needs 1-{FRAGMENT_MAX_CHARS} characters")
            mem.info(memory_id)  # never creates a memory
            fragment = mem.add_fragment(memory_id, content, category=category)  # audited (origin manual)
            return query_url(memory_url(memory_id), notice="fact added", fact=fragment.id) + "#facts"

        return await edit(request, run)

    # Fragment routes first: a path ending in /delete must not be read as the memory's own.
    @router.post("/memories/{memory_id:path}/fragments/{fragment_id}/edit", summary="Correct a fact")
    async def edit_fragment(request: Request, memory_id: str, fragment_id: str) -> Response:
        form = await _form(request)

        def run() -> str:
            content = form.get("content", "").strip()
            if not content or len(content) > FRAGMENT_MAX_CHARS:
                raise _PageError(400, f"a corrected fact needs 1-{FRAGMENT_MAX_CHARS} characters")
            mem.update_fragment(memory_id, fragment_id, content=content)  # audited, then a lifecycle run
            return query_url(memory_url(memory_id), notice="fact corrected") + "#facts"

        return await edit(request, run)

    @router.post("/memories/{memory_id:path}/fragments/{fragment_id}/delete", summary="Delete a fact")
    async def delete_fragment(request: Request, memory_id: str, fragment_id: str) -> Response:
        def run() -> str:
            mem.delete_fragment(memory_id, fragment_id)
            return query_url(memory_url(memory_id), notice="fact deleted") + "#facts"

        return await edit(request, run)

    @router.get("/memories/{memory_id:path}/search", response_class=HTMLResponse, summary="Search a memory")
    async def search(
        memory_id: str,
        q: str = "",
        channel: str = "",
        role: str = "",
        category: str = "",
        status: str = "active",
        since: str = "",
        until: str = "",
    ) -> Response:
        try:
            filters = SearchFilters(
                channel=channel, role=role, category=category, status=status, since=since, until=until
            )
        except ValueError as exc:
            return _error_page(400, str(exc))
        return await render(search_page, mem, memory_id, q[:500], filters)

    @router.get("/memories/{memory_id:path}/graph", response_class=HTMLResponse, summary="Memory graph")
    async def graph(memory_id: str) -> Response:
        return await render(graph_page, mem, memory_id)

    @router.get("/memories/{memory_id:path}/inject", response_class=HTMLResponse, summary="Inject preview")
    async def inject(
        memory_id: str,
        vendor: str = "trtc",
        query: str = "",
        persona: str = "",
        budget: int | None = None,
        options: str = "",
    ) -> Response:
        return await render(
            inject_page,
            mem,
            memory_id,
            vendor=vendor,
            query=query,
            persona=persona,
            budget=budget,
            options_text=options,
        )

    @router.get(
        "/memories/{memory_id:path}/lifecycle", response_class=HTMLResponse, summary="Lifecycle graph"
    )
    async def lifecycle(memory_id: str) -> Response:
        return await render(lifecycle_page, mem, memory_id)

    @router.get("/memories/{memory_id:path}/delete", response_class=HTMLResponse, summary="Confirm deletion")
    async def confirm_delete(memory_id: str) -> Response:
        def confirm() -> str:
            info = mem.info(memory_id)
            body = (
                f"<h1>Delete {esc(memory_id)}?</h1>"
                f"<p>This removes its {info.message_count} messages, its facts, variables, summary, "
                "audit log, dead letters and checkpoints. It cannot be undone.</p>"
                f'<form method="post" action="{esc(memory_url(memory_id, "/delete"))}" class="confirm">'
                f'<label>Type the memory id to confirm <input name="confirm" autocomplete="off" '
                'aria-label="memory id to confirm"></label> '
                '<button class="danger">Delete memory</button></form>'
                f'<p><a href="{esc(memory_url(memory_id))}">cancel</a></p>'
            )
            return layout(
                f"delete {memory_id}", body, crumbs=[(memory_id, memory_url(memory_id)), ("delete", None)]
            )

        return await render(confirm)

    @router.post("/memories/{memory_id:path}/delete", summary="Delete a memory")
    async def delete_memory(request: Request, memory_id: str) -> Response:
        form = await _form(request)

        def run() -> str:
            if form.get("confirm", "").strip() != memory_id:
                raise _PageError(400, f"type the memory id {memory_id!r} exactly to delete it")
            if not mem.delete(memory_id):
                raise MemoryNotFoundError(f"memory {memory_id!r} not found")
            return query_url("/", notice=f"deleted {memory_id}")

        return await edit(request, run)

    @router.post("/memories/{memory_id:path}/variables", summary="Set or clear a manual variable")
    async def variables(request: Request, memory_id: str) -> Response:
        form = await _form(request)

        def run() -> str:
            mem.info(memory_id)
            name = form.get("name", "").strip()
            if form.get("action") == "clear":
                mem.clear_variable(memory_id, name)
                notice = f"cleared the manual value of {name}"
            else:
                value = _parse_value(mem, memory_id, name, form.get("value", ""))
                mem.set_variable(memory_id, name, value)
                notice = f"set {name} by hand"
            return query_url(memory_url(memory_id), notice=notice) + "#variables"

        return await edit(request, run)

    @router.get("/memories/{memory_id:path}", response_class=HTMLResponse, summary="Memory")
    async def memory(
        memory_id: str,
        fact: str | None = None,
        before: str | None = None,
        after: str | None = None,
        notice: str = "",
    ) -> Response:
        try:
            return await render(
                memory_page, mem, memory_id, fact=fact, before=before, after=after, notice=notice
            )
        except ValueError as exc:  # a malformed timeline cursor
            return _error_page(400, str(exc))

    return router
