"""``convmem variables``: define the variable schema, set and clear manual values."""

from __future__ import annotations

import argparse
import json

from convmem_graph.cli._common import (
    CliError,
    add_db_argument,
    dump_json,
    open_existing,
    open_memory,
    subcommand,
)

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command and its actions."""
    p = subcommand(
        sub,
        "variables",
        "Manage a memory's profile variables (a manual value always wins over an inferred one).",
        """convmem variables define mem_1 city "the city the user lives in" --no-infer
convmem variables set mem_1 city 上海
convmem variables clear mem_1 city
convmem variables list mem_1 --json
convmem variables schema mem_1   # each field, and how it is filled: rule, manual only, needs a model""",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    d = actions.add_parser("define", help="define (or redefine) a variable; the default schema is kept")
    d.add_argument("memory")
    d.add_argument("name")
    d.add_argument("description", nargs="?", default="")
    d.add_argument("--type", choices=["string", "integer", "list"], default="string")
    d.add_argument("--no-infer", action="store_true", help="never infer this variable from fragments")
    s = actions.add_parser("set", help='set a manual value (JSON accepted: 1996, ["running"])')
    s.add_argument("memory")
    s.add_argument("name")
    s.add_argument("value")
    c = actions.add_parser("clear", help="clear a manual value; inference takes the field back")
    c.add_argument("memory")
    c.add_argument("name")
    ls = actions.add_parser("list", help="print effective values")
    ls.add_argument("memory")
    ls.add_argument("--json", action="store_true")
    sc = actions.add_parser(
        "schema", help="print the fields and how each is filled (rule, manual, needs a model)"
    )
    sc.add_argument("memory")
    sc.add_argument("--json", action="store_true")
    for a in (d, s, c, ls, sc):
        add_db_argument(a)
    p.set_defaults(func=run)


def _parse_value(text: str) -> str | int | list[str]:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, bool) or not isinstance(value, str | int | list):
        return text
    if isinstance(value, list):
        return [str(v) for v in value]
    return value


def run(args: argparse.Namespace) -> int:
    """Carry out the action."""
    from convmem_graph.models import VariableSpec

    # Only "define" may create a memory; the other actions need an existing one.
    opener = open_memory if args.action == "define" else open_existing
    with opener(args) as mem:
        if args.action != "define":
            mem.info(args.memory)
        if args.action == "define":
            from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS

            # The first definition starts from the default schema, so defining adds a field.
            current = mem.store.get_specs(args.memory) or list(DEFAULT_VARIABLE_SPECS)
            existing = {s.name: s for s in current}
            existing[args.name] = VariableSpec(
                name=args.name, description=args.description, infer=not args.no_infer, type=args.type
            )
            mem.define_variables(args.memory, existing.values())
            print(f"defined {args.name}")
        elif args.action == "set":
            v = mem.set_variable(args.memory, args.name, _parse_value(args.value))
            print(f"{v.name} = {v.value!r} (manual)")
        elif args.action == "clear":
            effective = mem.variables(args.memory).get(args.name)
            if effective is None or effective.origin != "manual":  # a manual value wins when present
                raise CliError(args.name, f"no manual value in memory {args.memory!r}")
            mem.clear_variable(args.memory, args.name)
            print(f"cleared manual value of {args.name}")
        elif args.action == "schema":
            _print_schema(mem.variable_schema(args.memory), as_json=args.json)
        else:
            values = mem.variables(args.memory)
            if args.json:
                dump_json({k: v.model_dump() for k, v in values.items()})
            else:
                for k, v in sorted(values.items()):
                    print(f"{k}\t{v.value}\t{v.origin}")
    return 0


def _print_schema(rows: list[dict[str, str | bool]], *, as_json: bool) -> None:
    if as_json:
        dump_json(rows)
        return
    for row in rows:
        print(f"{row['name']}\t{row['type']}\t{row['source']}")
