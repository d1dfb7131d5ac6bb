"""``convmem graph``: show the lifecycle graph (Mermaid, ASCII or PNG), offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from convmem_graph.cli._common import subcommand

__all__ = ["register", "render_graph"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "graph",
        "Show the memory lifecycle graph with its conditional edges (never calls a network service).",
        """convmem graph                      # Mermaid text, paste into any Mermaid viewer
convmem graph --format ascii
convmem graph --format png -o lifecycle.png   # needs graphviz + pygraphviz""",
    )
    p.add_argument("--format", choices=["mermaid", "ascii", "png"], default="mermaid")
    p.add_argument("-o", "--output", type=Path, default=None, help="write to a file instead of stdout")
    p.set_defaults(func=run)


def render_graph(fmt: str) -> str | bytes:
    """Render the lifecycle graph; PNG needs pygraphviz (Debian: graphviz libgraphviz-dev)."""
    from convmem_graph.graph import build_memory_graph

    drawable = build_memory_graph().compile().get_graph()
    if fmt == "mermaid":
        return drawable.draw_mermaid()
    if fmt == "ascii":
        return drawable.draw_ascii()
    try:
        import pygraphviz  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            "PNG output needs graphviz and pygraphviz: apt-get install graphviz libgraphviz-dev && "
            "pip install pygraphviz (or use --format mermaid / ascii)"
        ) from exc
    png: bytes = drawable.draw_png(None)
    return png


def run(args: argparse.Namespace) -> int:
    """Print or write the graph."""
    if args.format == "png" and args.output is None:
        print("convmem graph: --format png needs --output FILE", file=sys.stderr)
        return 2
    try:
        rendered = render_graph(args.format)
    except (RuntimeError, ImportError) as exc:
        print(f"convmem graph: {exc}", file=sys.stderr)
        return 2
    if args.output is not None:
        data = rendered if isinstance(rendered, bytes) else rendered.encode("utf-8")
        args.output.write_bytes(data)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(rendered if isinstance(rendered, str) else rendered.decode("utf-8", "replace"))
        sys.stdout.write("\n")
    return 0
