"""``convmem call start``: start a TRTC or Agora voice agent with the memory injected.

It pulls the user's latest IM turns first when IM is configured (``CONVMEM_IM_SDKAPPID`` and
``--im-bot``), builds the payload from the memory exactly as ``convmem inject`` prints it, calls the
vendor and prints the task id (TRTC) or agent id (Agora). The call is registered to the memory
in the store (:mod:`convmem_graph.server.calls`: TRTC task with its bot and human, Agora agent),
so ``convmem serve`` routes its callbacks and 103 there whatever the mapping, and the memory id
is written where the vendor copies it into every LLM request (TRTC ``LLMConfig.MetaInfo``, Agora
``llm.params``; the memory proxy takes it out before the model sees the request) and into Agora
``labels`` (``--no-memory-tag`` leaves the options as they are).

Credentials come from the environment and are never printed:

- TRTC: ``CONVMEM_TRTC_SECRET_ID``, ``CONVMEM_TRTC_SECRET_KEY``, ``CONVMEM_TRTC_REGION``
  (default ``ap-guangzhou``), ``CONVMEM_TRTC_ENDPOINT`` (default ``trtc.tencentcloudapi.com``).
- Agora: ``CONVMEM_AGORA_APP_ID``, ``CONVMEM_AGORA_CUSTOMER_ID``, ``CONVMEM_AGORA_CUSTOMER_SECRET``
  (or ``CONVMEM_AGORA_TOKEN``), ``CONVMEM_AGORA_HOST`` (default ``https://api.agora.io``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from convmem_graph.cli._common import add_db_argument, dump_json, env_settings, open_memory, subcommand

__all__ = ["register", "start_call"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "call",
        "Start a voice agent (TRTC StartAIConversation or Agora join) with the memory injected.",
        """convmem call start --vendor trtc --memory u_10086 --options trtc_call.json --persona 你是小雨
convmem call start --vendor agora --memory u_10086 --options agora_join.json --im-bot ai_xiaoyu_bot""",
    )
    p.add_argument("action", choices=["start"])
    p.add_argument("--vendor", required=True, choices=["trtc", "agora"])
    p.add_argument("--memory", required=True, metavar="ID")
    p.add_argument(
        "--options",
        type=Path,
        required=True,
        metavar="FILE",
        help="JSON vendor options as for `convmem inject` (TRTC: sdk_app_id, room_id, agent_config, "
        "tts_config, llm ...; Agora: name, properties, llm ...)",
    )
    p.add_argument("--persona", default="", help="persona text placed before the memory block")
    p.add_argument("--im-user", default=None, help="IM UserID to pull first (default: the memory id)")
    p.add_argument("--im-bot", default=None, help="IM bot UserID: pull the latest IM turns first")
    p.add_argument(
        "--no-memory-tag",
        action="store_true",
        help="do not add memory_id to MetaInfo / llm.params / labels (an LLM URL that is not the proxy)",
    )
    add_db_argument(p)
    p.set_defaults(func=run)


def _need(value: SecretStr | str | None, field: str) -> str:
    """A required credential of the settings, or an error naming its variable."""
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    if not text:
        raise ValueError(f"set CONVMEM_{field.upper()}")
    return text


def start_call(
    mem: Any,
    vendor: Literal["trtc", "agora"],
    memory_id: str,
    options: dict[str, Any],
    *,
    client: Any = None,
    tag: bool = True,
) -> str:
    """Build the vendor body from ``memory_id``, start the agent and register the call.

    Args:
        mem: The open :class:`~convmem_graph.memory.ConvMemory`.
        vendor: ``trtc`` or ``agora``.
        memory_id: The memory to inject.
        options: Vendor options (see :func:`convmem_graph.payloads.render.render_payload`).
        client: A TRTC or Agora client (default: built from the environment).
        tag: Write the memory id where the vendor passes it on (see the module docstring).

    Returns:
        The TRTC task id or the Agora agent id.
    """
    from convmem_graph.server.calls import register_call, tag_call_options
    from convmem_graph.server.inbox import Inbox

    mem.store.ensure_memory(memory_id)  # a first call of a new user starts with an empty memory
    if tag:
        options = tag_call_options(vendor, options, memory_id)
    body = mem.payload(memory_id, vendor, **options)
    started = _start(vendor, body, client)
    # The callbacks, 103 and LLM requests of this call belong to this memory, whatever the mapping.
    register_call(Inbox(mem.store), vendor, body, started, memory_id)
    return started


def _start(vendor: str, body: dict[str, Any], client: Any) -> str:
    if vendor == "trtc":
        from convmem_graph.clients.trtc import TRTCClient

        env = env_settings()
        client = client or TRTCClient(
            _need(env.trtc_secret_id, "trtc_secret_id"),
            _need(env.trtc_secret_key, "trtc_secret_key"),
            env.trtc_region or "ap-guangzhou",
            endpoint=env.trtc_endpoint or "trtc.tencentcloudapi.com",
            scheme=env.trtc_scheme or "https",
        )
        task_id: str = client.start_ai_conversation(body)
        return task_id
    from convmem_graph.clients.agora import AgoraConvoAIClient

    if client is None:
        env = env_settings()
        token = env.agora_token.get_secret_value() if env.agora_token else ""
        auth: dict[str, Any] = (
            {"token": token}
            if token
            else {
                "customer_id": _need(env.agora_customer_id, "agora_customer_id"),
                "customer_secret": _need(env.agora_customer_secret, "agora_customer_secret"),
            }
        )
        with AgoraConvoAIClient(
            _need(env.agora_app_id, "agora_app_id"),
            host=env.agora_host or "https://api.agora.io",
            **auth,
        ) as agora:
            return str(agora.join(body)["agent_id"])
    return str(client.join(body)["agent_id"])


def run(args: argparse.Namespace) -> int:
    """Pull IM (when configured), build the body, call the vendor, print the id."""
    from convmem_graph.clients import VendorError

    try:
        options = json.loads(args.options.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"convmem call start: {args.options}: not a JSON options file: {exc}", file=sys.stderr)
        return 2
    if not isinstance(options, dict):
        print(f"convmem call start: {args.options}: $: expected a JSON object", file=sys.stderr)
        return 2
    options = {k: v for k, v in options.items() if not k.startswith("_")}
    if args.persona:
        options["persona"] = args.persona
    if args.im_bot:
        args.bot_id = [args.im_bot]
    with open_memory(args) as mem:
        try:
            if args.im_bot and env_settings().im_sdkappid:
                from convmem_graph.cli.pull import pull_im

                pull_im(mem, args.im_user or args.memory, args.im_bot, memory_id=args.memory)
            started = start_call(mem, args.vendor, args.memory, options, tag=not args.no_memory_tag)
        except (VendorError, ValueError) as exc:
            print(f"convmem call start: {exc}", file=sys.stderr)
            return 2
    key = "task_id" if args.vendor == "trtc" else "agent_id"
    dump_json({"vendor": args.vendor, "memory_id": args.memory, key: started})
    return 0
