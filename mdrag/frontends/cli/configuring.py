"""`mdrag config`: the settings in effect, and where each one's value came from."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from mdrag.frontends.cli.parser import common_flags, overrides

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.frontends.cli.parser import Commands


def register(commands: Commands) -> None:
    """Declare `mdrag config`."""
    p = commands.add_parser(
        "config",
        help="show the settings in effect and where each came from",
        epilog="example: mdrag config --json   (each setting's value and where it came from)",
    )
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--markdown", action="store_true", help="print every setting's default and help as a Markdown table")
    common_flags(p)
    p.set_defaults(run=_config)


def _config(args: argparse.Namespace) -> int:
    """`mdrag config`: the settings in effect and where each came from, or (--markdown) the tables of the docs."""
    from mdrag.config import load_config
    from mdrag.knowledge.config import keys_table
    from mdrag.settings import settings_table

    if args.markdown:  # the generated tables of docs/configuration.md and docs/mcp.md, between the comments there
        for what, source, table in (
            ("settings table", "mdrag/settings.py", settings_table()),
            (".knowledge/config.yaml keys", "mdrag/knowledge/config.py", keys_table()),
        ):
            print(f"<!-- {what}: made by `mdrag config --markdown` from {source}; edit it there -->")
            print(f"{table}<!-- end of {what} -->\n")
        return 0
    config = load_config(overrides(args))
    rows = config.explain()
    if args.json:
        print(
            json.dumps({"home": str(config.home), "file": config.file and str(config.file), "settings": rows}, indent=2)
        )
        return 0
    print(f"# config file: {config.file or f'none ({config.home}/config.yaml or config.toml)'}")
    width = max(map(len, rows))
    for key, row in rows.items():
        print(f"{key:<{width}}  {json.dumps(row['value'])}  # {_origin(row, rows, config)}")
    return 0


def _origin(row: dict[str, Any], rows: dict[str, dict[str, Any]], config: Config) -> str:
    """Where a setting's value in effect came from, as `mdrag config` prints it after its value."""
    if row["source"] == "inherited":
        parent = rows[row["from"]]
        return f"from {row['from']}" + ("" if parent["source"] == "default" else f" ({_origin(parent, rows, config)})")
    if "depends_on" in row:
        return f"default for {row['depends_on']} {config[row['depends_on']]}"
    return str(row.get("variable") or row["source"])
