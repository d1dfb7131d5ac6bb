"""``convmem serve``: the live service (vendor webhooks, the memory proxy) on uvicorn.

Needs the ``server`` extra (``pip install 'convmem-graph[server]'``).
"""

from __future__ import annotations

import argparse
import sys

from convmem_graph.cli._common import add_db_argument, add_embeddings_argument, subcommand

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "serve",
        "Serve TRTC/Agora webhooks and an OpenAI-compatible memory proxy over the store.",
        """CONVMEM_TRTC_CALLBACK_KEY=... CONVMEM_BOT_IDS=ai_xiaoyu_bot convmem serve --db convmem.db
CONVMEM_UPSTREAM_URL=https://llm.example.com/v1/chat/completions convmem serve --port 9000
convmem serve --host 0.0.0.0 --token-file /run/secrets/convmem-token   # beyond loopback only with a token""",
    )
    add_db_argument(p)
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8080; 0 picks a free one)")
    tokens = p.add_mutually_exclusive_group()
    tokens.add_argument(
        "--token",
        default=None,
        help="admin bearer token (visible in the process list: prefer --token-file or $CONVMEM_SERVE_TOKEN)",
    )
    tokens.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="file holding the admin token, trailing newline stripped (default: $CONVMEM_SERVE_TOKEN_FILE)",
    )
    p.add_argument("--bot-id", action="append", default=[], metavar="ID", help="a bot account id")
    add_embeddings_argument(p)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the settings (flags over environment), refuse an open bind without a token, serve."""
    try:
        import uvicorn

        from convmem_graph.server.app import create_app
        from convmem_graph.server.settings import ServeSettings, is_loopback
    except ModuleNotFoundError as exc:
        sys.stderr.write(f"convmem serve: {exc.name} is missing; pip install 'convmem-graph[server]'\n")
        return 2
    overrides: dict[str, object] = {"db": args.db}
    if args.host is not None:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    # A flag replaces the other source from the environment, so the two never clash.
    if args.token:
        overrides.update(token=args.token, token_file=None)
    if args.token_file:
        overrides.update(token_file=args.token_file, token=None)
    if args.bot_id:
        overrides["bot_ids"] = args.bot_id
    if args.embeddings:
        overrides["embeddings"] = args.embeddings
    try:
        settings = ServeSettings(**overrides)  # type: ignore[arg-type]
    except ValueError as exc:
        sys.stderr.write(f"convmem serve: bad settings: {exc}\n")
        return 2
    if not is_loopback(settings.host) and settings.secret("token") is None:
        # A chat token alone would leave the viewer and the Bailian API open to the network.
        chat_only = ""
        if settings.secret("proxy_token"):
            chat_only = " (the admin one: CONVMEM_PROXY_TOKEN alone leaves the viewer open)"
        sys.stderr.write(
            f"convmem serve: refusing to bind {settings.host} without a token{chat_only}; "
            "set --token-file, CONVMEM_SERVE_TOKEN_FILE or CONVMEM_SERVE_TOKEN (or bind 127.0.0.1)\n"
        )
        return 2
    if settings.embeddings:  # a wrong name exits here, before the store opens
        from convmem_graph.embeddings import embeddings_from_name

        try:
            embeddings_from_name(settings.embeddings)
        except ValueError as exc:
            sys.stderr.write(f"convmem serve: --embeddings: {exc}\n")
            return 2
    app = create_app(settings)
    # Lifecycle runs and block rebuilds share this interpreter with the event loop: hand the GIL
    # over after 1 ms instead of 5 ms, so a proxied stream waits less behind a CPU-bound run.
    sys.setswitchinterval(0.001)
    # uvicorn handles SIGTERM/SIGINT: it stops accepting, finishes requests, runs the lifespan
    # shutdown (the worker drains what was acknowledged) and exits.
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        access_log=settings.access_log == "1",
        timeout_graceful_shutdown=30,
    )
    return 0
