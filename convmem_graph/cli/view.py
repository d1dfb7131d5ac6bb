"""``convmem view [MEMORY]``: serve the memory viewer on 127.0.0.1 and open it in a browser.

Needs the ``server`` extra. The server is ``convmem serve``'s app (so the Bailian-compatible API
and the webhooks are there too), bound to loopback only and without a token.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
import webbrowser

from convmem_graph.cli._common import add_db_argument, open_existing, subcommand

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "view",
        "Open the memory viewer (timeline, facts with provenance, variables, inject preview) in a browser.",
        """convmem view --db /tmp/convmem-demo.db            # the list of memories
convmem view u_10086 --db /tmp/convmem-demo.db    # one memory's page
convmem view --port 8765 --no-browser             # print the URL only""",
    )
    p.add_argument(
        "memory", metavar="MEMORY", nargs="?", default=None, help="memory to open (default: the list)"
    )
    add_db_argument(p)
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser, print the URL only")
    p.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.set_defaults(func=run)


def _open_when_up(server: object, url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not getattr(server, "started", False):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    webbrowser.open(url)


def run(args: argparse.Namespace) -> int:
    """Check the memory exists, bind loopback, print the URL, open the browser, serve until interrupted."""
    try:
        import uvicorn

        from convmem_graph.server.app import create_app
        from convmem_graph.server.settings import ServeSettings
        from convmem_graph.viewer._html import memory_url
    except ModuleNotFoundError as exc:
        sys.stderr.write(f"convmem view: {exc.name} is missing; pip install 'convmem-graph[server]'\n")
        return 2
    # Refused like `convmem show`: a typo in the database or the memory id is one line and exit 2,
    # not a server showing a 404 page (and never a new empty database).
    with open_existing(args) as mem:
        if args.memory is not None:
            mem.info(args.memory)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", args.port))
    except OSError as exc:
        sys.stderr.write(f"convmem view: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}\n")
        sock.close()
        return 2
    port = sock.getsockname()[1]
    # Loopback only and no token: this is the local user's own database.
    settings = ServeSettings(db=args.db, host="127.0.0.1", port=port, token=None)
    app = create_app(settings)
    url = f"http://127.0.0.1:{port}" + (memory_url(args.memory) if args.memory else "/")
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=10))
    sys.stdout.write(f"convmem viewer: {url}  (Ctrl+C to stop)\n")
    sys.stdout.flush()
    if not args.no_browser:
        threading.Thread(target=_open_when_up, args=(server, url), daemon=True).start()
    server.run(sockets=[sock])
    return 0
