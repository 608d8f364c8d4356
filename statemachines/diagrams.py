"""Write (or ``--check``) the generated diagrams of every registered machine: ``docs/statemachines/<name>.dot`` and
``<name>.md`` (a mermaid block plus the tables), from the transition tables, which are the spec.

    python -m statemachines.diagrams            # rewrite the files
    python -m statemachines.diagrams --check    # exit 1 if a committed file differs from its table

The rendering lives in ``core``; this module only maps machines to file names and texts. File access and the
command line are confined to ``main`` so the module stays importable by the purity test.
"""

from __future__ import annotations

from statemachines.core import render_dot, render_markdown
from statemachines.registry import MACHINES

# Where the generated files live, relative to the repository root.
DOCS_DIR = ("docs", "statemachines")


def generated_files() -> dict[str, str]:
    """``{file name: text}`` for every registered machine, exactly as they must be committed."""
    files: dict[str, str] = {}
    for machine in MACHINES:
        name = machine.table.machine
        files[f"{name}.dot"] = render_dot(machine.table)
        files[f"{name}.md"] = render_markdown(machine.table)
    return files


def main(argv: list[str] | None = None) -> int:
    """Write the files, or with ``--check`` report the stale ones and return 1."""
    import argparse
    import pathlib

    parser = argparse.ArgumentParser(prog="python -m statemachines.diagrams", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when stale")
    parser.add_argument("--root", default=None, help="repository root (default: the one holding this package)")
    args = parser.parse_args(argv)
    root = pathlib.Path(args.root) if args.root else pathlib.Path(__file__).resolve().parent.parent
    folder = root.joinpath(*DOCS_DIR)
    stale = []
    for name, text in generated_files().items():
        path = folder / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(str(path))
        if not args.check:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "written"
    print(f"{len(stale)} file(s) {verb}" + "".join(f"\n  {p}" for p in stale))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
