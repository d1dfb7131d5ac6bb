"""``convmem pull im``: pull a user's one-to-one IM history with the bot and store it (resumable).

Credentials come from the environment: ``CONVMEM_IM_SDKAPPID``, ``CONVMEM_IM_SECRET_KEY`` (UserSigs
are made locally), ``CONVMEM_IM_ADMIN`` (default ``administrator``) and ``CONVMEM_IM_BASE_URL``
(default ``https://console.tim.qq.com``; use your data center's domain). Every page of the window
is fetched, then the lifecycle runs once; message ids come from IM's ``MsgKey``, so pulling a window
again stores nothing twice. The newest message time pulled is kept per (user, bot) in
``cm_im_pull_cursors``: the next pull without ``--since`` starts there, so an interrupted pull (the
cursor only moves after a run committed) is simply run again.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sqlalchemy import select

from convmem_graph.cli._common import add_db_argument, env_settings, open_memory, subcommand
from convmem_graph.store._optional import ensure_tables, present
from convmem_graph.store.registry import pull_cursors

__all__ = ["pull_im", "register"]

#: IM keeps roaming messages 7 days by default: the first pull looks that far back.
_DEFAULT_LOOKBACK_S = 7 * 24 * 3600


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "pull",
        "Pull vendor history into the store (im: Tencent IM admin_getroammsg, all pages).",
        """convmem pull im --user u_10086 --bot ai_xiaoyu_bot  # with CONVMEM_IM_SDKAPPID and _SECRET_KEY
convmem pull im --user u_10086 --bot @RBT#xiaoyu --since 1767225600 --memory mem_u10086""",
    )
    p.add_argument("what", choices=["im"], help="what to pull")
    p.add_argument("--user", required=True, help="the human's IM UserID (whose view is pulled)")
    p.add_argument("--bot", required=True, help="the bot's IM UserID (the peer)")
    p.add_argument("--memory", default=None, help="memory id (default: the user id)")
    p.add_argument("--since", type=int, default=None, help="window start, Unix seconds (default: the cursor)")
    p.add_argument("--until", type=int, default=None, help="window end, Unix seconds (default: now)")
    p.add_argument("--page-size", type=int, default=100, help="MaxCnt per page")
    add_db_argument(p)
    p.set_defaults(func=run)


def _im_client(**overrides: Any) -> Any:
    from convmem_graph.clients.tencent_im import DEFAULT_BASE_URL, TencentIMClient

    env = env_settings()
    app_id = env.im_sdkappid or ""
    key = env.im_secret_key.get_secret_value() if env.im_secret_key else ""
    if not app_id.isdigit() or not key:
        raise ValueError("set CONVMEM_IM_SDKAPPID (digits) and CONVMEM_IM_SECRET_KEY to pull IM history")
    return TencentIMClient(
        int(app_id),
        key,
        env.im_admin or "administrator",
        base_url=env.im_base_url or DEFAULT_BASE_URL,
        **overrides,
    )


def pull_im(
    mem: Any,
    user: str,
    bot: str,
    *,
    memory_id: str | None = None,
    since: int | None = None,
    until: int | None = None,
    page_size: int = 100,
    client: Any = None,
) -> tuple[int, int]:
    """Pull one IM conversation window into ``memory_id``; return (pages, messages stored).

    Args:
        mem: The open :class:`~convmem_graph.memory.ConvMemory`.
        user: The human's UserID.
        bot: The bot's UserID.
        memory_id: Target memory (default ``user``).
        since: Window start in Unix seconds (default: the stored cursor, else 7 days ago).
        until: Window end in Unix seconds (default: now).
        page_size: ``MaxCnt`` per page.
        client: A :class:`~convmem_graph.clients.tencent_im.TencentIMClient` (default: from the
            environment).
    """
    store = mem.store
    now = int(time.time())
    if since is None:
        with store.read() as conn:
            # A SQLite file has the cursors' table from its first pull on (store._optional).
            row = (
                conn.execute(
                    select(pull_cursors.c.last_time).where(
                        pull_cursors.c.user_id == user, pull_cursors.c.bot_id == bot
                    )
                ).first()
                if present(conn, pull_cursors)
                else None
            )
        # One second of overlap: several messages share a second; re-read ones are not stored twice.
        since = int(row[0]) - 1 if row is not None else now - _DEFAULT_LOOKBACK_S
    until = now if until is None else until
    owned = client is None
    client = client or _im_client()
    try:
        doc = client.get_roam_messages(user, bot, min_time=since, max_time=until, max_cnt=page_size)
    finally:
        if owned:
            client.close()
    pages = doc["pages"]
    times = [m.get("MsgTimeStamp") for p in pages for m in p["response"].get("MsgList", [])]
    newest = max((t for t in times if isinstance(t, int)), default=None)
    stored = 0
    if times:
        stored = mem.ingest(memory_id or user, doc, source="tencent_im").new_messages
    if newest is not None:
        from convmem_graph.store.engine import execute_upsert

        with store.transaction() as conn:
            ensure_tables(conn, pull_cursors)
            execute_upsert(
                conn,
                pull_cursors,
                ("user_id", "bot_id"),
                {"user_id": user, "bot_id": bot, "last_time": newest, "memory_id": memory_id or user},
            )
    return len(pages), stored


def run(args: argparse.Namespace) -> int:
    """Pull, store, and print what was done."""
    from convmem_graph.clients import VendorError

    args.bot_id = [args.bot]  # the bot's messages are the assistant's
    with open_memory(args) as mem:
        try:
            pages, count = pull_im(
                mem,
                args.user,
                args.bot,
                memory_id=args.memory,
                since=args.since,
                until=args.until,
                page_size=args.page_size,
            )
        except (VendorError, ValueError) as exc:
            print(f"convmem pull im: {exc}", file=sys.stderr)
            return 2
    print(f"pulled {pages} page(s), {count} new message(s) into {args.memory or args.user}")
    return 0
