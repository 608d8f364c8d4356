"""``statemachines/`` is pure and synchronous: it imports nothing from the I/O world, neither directly nor through
its dependencies. Checked twice: an AST scan of every module, and a fresh interpreter that imports them all."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import statemachines

PACKAGE_DIR = Path(statemachines.__file__).parent
# Anything doing I/O, concurrency, time or randomness.
FORBIDDEN = frozenset({
    "trio", "anyio", "asyncio", "httpx", "httpx2", "httpcore", "h11", "h2", "quart", "quart_trio", "hypercorn",
    "time", "datetime", "random", "secrets", "uuid", "logging", "socket", "ssl", "select", "selectors", "signal",
    "threading", "multiprocessing", "concurrent", "subprocess", "os", "io", "shutil", "tempfile", "sqlite3",
    "pathlib", "sys", "argparse",
})
# Allowed only inside a function called ``main`` (the command-line entry points), never at import time.
ONLY_IN_MAIN = frozenset({"pathlib", "sys", "argparse"})


def _modules() -> list[str]:
    """Every module of the package and its subpackages (``statemachines.checking``), by dotted name."""
    return sorted(info.name for info in pkgutil.walk_packages([str(PACKAGE_DIR)], "statemachines."))


def _imports(tree: ast.AST) -> list[tuple[str, str | None]]:
    """(top-level module imported, enclosing function name or None) for every import statement in ``tree``."""
    found = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name.split(".")[0], function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], function))
            # `if __name__ == "__main__": import sys` counts as module level (function None): it runs on `-m`.
            visit(child, function)

    visit(tree, None)
    return found


def test_statemachines_package_has_the_expected_modules():
    # Guards the two scans below against silently scanning nothing.
    assert {"statemachines.core", "statemachines.rollout_gate", "statemachines.checking.explorer",
            "statemachines.checking.__main__"} <= set(_modules())


def test_statemachines_modules_import_nothing_forbidden_per_ast():
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for module, function in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if module in FORBIDDEN and not (module in ONLY_IN_MAIN and function == "main"):
                offenders.append(f"{path.relative_to(PACKAGE_DIR)}: import {module} in {function or 'module scope'}")
    assert offenders == []


def test_statemachines_ast_scan_catches_a_forbidden_import():
    # The scanner itself can fail: module-level, nested and `from` imports are all seen; `main` is exempt.
    source = "import time\ndef f():\n    from trio import lowlevel\ndef main():\n    import sys\n"
    assert _imports(ast.parse(source)) == [("time", None), ("trio", "f"), ("sys", "main")]


def test_statemachines_import_loads_nothing_forbidden_in_a_fresh_interpreter():
    # attrs (the one allowed dependency) itself loads threading, and the interpreter loads os and time at start-up;
    # so the baseline is taken after importing attrs, and everything importing statemachines adds is checked.
    modules = ", ".join(_modules())
    code = (
        "import sys\n"
        "import attrs, enum, types, typing, collections.abc\n"
        "baseline = set(sys.modules)\n"
        f"import statemachines, {modules}\n"
        f"forbidden = {sorted(FORBIDDEN)!r}\n"
        "print(sorted(set(forbidden) & (set(sys.modules) - baseline)))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
