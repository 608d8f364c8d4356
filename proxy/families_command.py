"""``dressage-proxy families``: every supported model family, its aliases, parsers, mode and verification.

A table by default, ``--json`` for programs. Reads the registry only (``proxy/families/registry.py``); no
tokenizer is loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from proxy.families import FAMILIES, ModelFamily

COLUMNS = ("family", "aliases", "tool-call parser", "reasoning parser", "mode", "backend", "tokenizer folder", "verified")


def family_row(family: ModelFamily) -> dict[str, Any]:
    """One family as the JSON object ``--json`` prints."""
    return {
        "name": family.name,
        "aliases": list(family.aliases),
        "tool_call_parser": family.tool_call_parser,
        "reasoning_parser": family.reasoning_parser,
        "mode": family.mode.value,
        "tito_backend": family.tito_backend,
        "tokenizer_folder": family.tokenizer_folder,
        "template_sha256": list(family.template_sha256),
        "verified": family.verified,
        "description": family.description,
    }


def render_table(rows: list[dict[str, Any]]) -> str:
    """Plain aligned columns (no wrapping: the verification text is the last column)."""
    cells = [
        [row["name"], ", ".join(row["aliases"]) or "-", row["tool_call_parser"] or "-",
         row["reasoning_parser"] or "-", row["mode"], row["tito_backend"], row["tokenizer_folder"] or "-", row["verified"]]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [list(COLUMNS), *cells]) for i in range(len(COLUMNS) - 1)]
    lines = []
    for line in [list(COLUMNS), *cells]:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1])
    return "\n".join(lines)


def families_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dressage-proxy families",
        description="List the supported model families: aliases (what --model-family takes), SGLang parser names, "
        "TITO mode (incremental, or last_step: a full render every step), rendering back end (own, or the "
        "renderers package) and how each was verified "
        "(docs/families.md).",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    args = parser.parse_args(argv)
    rows = [family_row(family) for family in FAMILIES]
    print(json.dumps(rows, indent=2) if args.json else render_table(rows), file=sys.stdout)
    return 0
